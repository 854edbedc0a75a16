"""A study as a publishable artifact: one folder a reader can check it from, and re-run.

``pack`` writes, for a study (``scalestudy artifact pack``):

- ``results.db``: the study's runs as a SQLite database of their own (every attempt, steps,
  evaluations, rounds, timelines, summaries, model fits: ``study_copy``), with the runs' event
  files in ``results.db.events/``: every reading command opens it as any database
  (``--db sqlite:///FOLDER/results.db``);
- ``conf/study/run_<id>.yaml``: each run's composed configuration, as it ran (a value the run
  resolved, ``device: auto`` that ran on ``cpu``, as it resolved it, and said so), which
  ``scalestudy artifact rerun`` sweeps again (``study=glob(run_*)``), and ``sweeps.txt``, the sweep
  command lines that produced them (as each run recorded it, database URLs' passwords masked);
- ``site/<site>.yaml``: the site files, as installed now (their digest beside the one recorded at
  the sweep, where it was: a site file changed since is said so);
- ``software.json`` (versions, git commit and dirty state, MPI library, the site's modules) and
  ``machine.json`` (the hosts' hardware as the ranks read it: CPU model, sockets, cores, memory, OS
  and kernel; GPUs and driver; the site's interconnect; hosts by role, binding, NCCL's network, the
  site's network as measured);
- ``runs/<run_id>/``: each run's own files (launch line, spec, log, per-rank metrics), capped, and
  ``runs.csv``, ``steps.csv``: flat tables (``run_files``);
- ``report/``: the study's report (every figure, the configuration table, paper vs this run);
- ``README.md`` (``readme``), written from the study as an artifact-evaluation checklist asks:
  getting and installing the software, the hardware, each run's cost, the results to expect with
  their tolerance, checking and re-running;
- ``manifest.json``: every file with its SHA-256, what reading an artifact checks first.

Secrets never go in: no database URL (the runs' configs never held one: ``provenance``), account
names only with ``with_accounts``, the packer's places (paths, user, hosts) only with
``with_places`` (``scrub``).
"""

from __future__ import annotations

import hashlib
from contextlib import closing
import json
import shutil
import tarfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, select, update

from results_db.store import event_files, query
from results_db.store.connect import connect
from results_db.store.schema import Run
from results_db.store.study_copy import StudyCopyError, copy_study

from .readme import interconnect_of, readme
from .run_files import pack_run_files, write_flat_tables
from .scrub import (ACCOUNT_KEYS, places, scrub_places, scrub_run, shareable_command, shareable_environment,
                    text_scrubber)

MANIFEST = "manifest.json"
DATABASE = "results.db"
ARTIFACT_FORMAT = 1


class ArtifactError(ValueError):
    """An artifact that cannot be written or read as asked: one line, nothing written."""


@dataclass(frozen=True)
class Packed:
    folder: Path
    runs: int
    event_files: int
    archive: Path | None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def refuse_used_folder(out: Path) -> None:
    """An artifact goes into a new or empty folder only: packing never mixes with, or removes, what
    is there."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ArtifactError(f"--out {out}: exists and is not an empty folder; nothing was written")


def _check_out(out: Path) -> None:
    refuse_used_folder(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArtifactError(f"--out {out}: {exc.strerror or exc}") from None


def pack(engine: Engine, study: str, out: Path, with_accounts: bool = False, archive: bool = False,
         report: bool = True, with_places: bool = False) -> Packed:
    """Write the artifact of ``study`` into ``out`` (module docstring); on any failure the folder is
    removed again, so a half-written artifact never stays."""
    runs = query.runs(engine, study=study, attempts="all")
    if runs.empty:
        raise ArtifactError(f"study {study!r} has no runs in this database")
    out = Path(out)
    _check_out(out)
    try:
        files = _pack(engine, study, out, runs, with_accounts, report, with_places)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    tar = None
    if archive:
        tar = out.with_name(out.name + ".tar.gz")
        with tarfile.open(tar, "w:gz") as fh:
            fh.add(out, arcname=out.name)
    return Packed(out, len(runs), files, tar)


SHOWN_URL = f"sqlite:///{DATABASE}"   # the database as the artifact's own files name it: relative to the folder


def _pack(engine: Engine, study: str, out: Path, runs, with_accounts: bool, report: bool,
          with_places: bool = False) -> int:
    target_url = f"sqlite:///{(out / DATABASE).absolute()}"
    target = connect(target_url)
    try:
        try:
            root, hosts = (None, {}) if with_places else places(runs)
            copied = copy_study(engine, study, target, keep_ids=True, rewrite_run=scrub_run(with_accounts, root))
        except StudyCopyError as exc:
            raise ArtifactError(str(exc)) from None
        scrub_text = (lambda text: text) if with_places else text_scrubber(root, hosts)
        if not with_places:
            scrub_places(target, root, hosts, scrub_text)
        # beside the artifact's database, whatever $SCALESTUDY_EVENTS_DIR says: the folder carries them
        n_files = copy_event_files(engine, target, copied.run_ids, out / (DATABASE + ".events"))
        latest = runs[runs["latest"]] if "latest" in runs else runs
        _write_configs(out, latest, with_accounts, root)
        _write_sites(out, latest)
        interconnect = interconnect_of({p.stem: p for p in (out / "site").glob("*.yaml")})
        _write_json(out / "software.json", _software(latest, with_accounts, root))
        _write_json(out / "machine.json", _machine(engine, latest, hosts, interconnect))
        files = pack_run_files(latest, out, scrub_text)
        tables = write_flat_tables(target, study, out)
        if report:
            from results_db.report.html_report import build_report

            try:
                build_report(target, study, out / "report", SHOWN_URL)
            except Exception as exc:   # noqa: BLE001 - a study with nothing finished still packs
                (out / "report").mkdir(exist_ok=True)
                (out / "report" / "NOT-WRITTEN.txt").write_text(f"the report could not be written: {exc}\n")
        (out / "README.md").write_text(readme(study, latest, copied, n_files, files, interconnect, tables),
                                       encoding="utf-8")
    finally:
        target.dispose()
    if not with_places:
        # SQLite keeps a replaced value's bytes in its free pages until they are reused: rewritten
        # whole, the file holds only what its rows say (the connection layer opens a transaction
        # for every statement, which VACUUM refuses: the standard library's own connection)
        import sqlite3

        with closing(sqlite3.connect(out / DATABASE, isolation_level=None)) as raw:
            raw.execute("VACUUM")
    _write_manifest(out, study, len(runs))
    return n_files


def copy_event_files(source: Engine, target: Engine, run_ids: dict[int, int], folder: Path | None = None) -> int:
    """Exactly these runs' event files (source run id -> target run id), copied under the target
    database's own id (``event_files.file_name``) into ``folder`` (default: the target's events
    folder), and each target run's ``events_file`` set."""
    found = event_files.run_files(source, list(run_ids))
    if not found:
        return 0
    folder = folder or event_files.events_dir(target)
    if folder is None:
        raise ArtifactError("the target database keeps no event files (PostgreSQL without $SCALESTUDY_EVENTS_DIR): "
                            "set SCALESTUDY_EVENTS_DIR to bring the timelines; nothing was written")
    ident = event_files.database_id(target)
    with source.connect() as conn:
        names = dict(conn.execute(select(Run.id, Run.events_file).where(Run.id.in_(list(run_ids)),
                                                                          Run.events_file.is_not(None))).all())
    with target.begin() as conn:
        for old_id, name in names.items():
            new = event_files.file_name(run_ids[old_id], ident)
            dest = folder / new
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = found[name]
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)
            conn.execute(update(Run).where(Run.id == run_ids[old_id]).values(events_file=new))
    return len(names)


def _config_of(row, with_accounts: bool) -> tuple[dict[str, Any], list[str]]:
    """The run's configuration as it ran: a value the run resolved (``device: auto`` that ran on
    ``cpu``) as its spec recorded it, and the list of what was so resolved."""
    config = dict(row["config"]) if isinstance(row.get("config"), dict) else {}
    resolved = []   # the run's columns are its spec's fields, as it ran
    for key, value in list(config.items()):
        ran = row.get(key)
        if key in row and ran == ran and ran != value and isinstance(ran, (str, int, float, bool)) and \
                isinstance(value, (str, int, float, bool)) and key not in ACCOUNT_KEYS:
            config[key] = ran
            resolved.append(f"{key} {value} -> {ran}")
    if not with_accounts:
        for key in ACCOUNT_KEYS:
            config[key] = None
    for key in ("rerun", "dry_run", "db_url"):
        config.pop(key, None)
    return config, resolved


def _write_configs(out: Path, runs, with_accounts: bool, root: str | None = None) -> None:
    folder = out / "conf" / "study"
    folder.mkdir(parents=True)
    for row in runs.to_dict("records"):
        config, resolved = _config_of(row, with_accounts)
        if not config:
            continue
        text = ("# @package _global_\n"
                f"# run {row['run_id']} of study {row['study']} (run_key {row['run_key']}), as it ran\n"
                + (f"# resolved at the run: {', '.join(resolved)}\n" if resolved else "")
                + yaml.safe_dump(config, sort_keys=False))
        (folder / f"run_{int(row['run_id'])}.yaml").write_text(text, encoding="utf-8")
    commands = sorted({(r.get("environment") or {}).get("command") for r in runs.to_dict("records")} - {None})
    lines = sorted({shareable_command(c, with_accounts, root) for c in commands})
    (out / "sweeps.txt").write_text(
        "# the sweep command lines that produced this study's runs, as each run recorded it\n"
        + ("\n".join(lines) if lines else "# (not recorded: runs made before scalestudy recorded their command)") + "\n",
        encoding="utf-8")


def _write_sites(out: Path, runs) -> None:
    from importlib import resources

    installed = Path(str(resources.files("site_configs")))
    folder = out / "site"
    folder.mkdir()
    for site in sorted({str(s) for s in runs["site"].dropna()}):
        source = installed / f"{site}.yaml"
        if source.is_file():
            shutil.copy2(source, folder / f"{site}.yaml")


def _software(runs, with_accounts: bool, root: str | None = None) -> dict[str, Any]:
    def distinct(column: str) -> list:
        if column not in runs:
            return []
        seen = []
        for value in runs[column]:
            if value is not None and value == value and value not in seen:
                seen.append(value)
        return seen

    return {"git_commit": distinct("git_commit"), "git_dirty": distinct("git_dirty"),
            "orchestrator": [shareable_environment(e, with_accounts, root) for e in distinct("environment")],
            "ranks": distinct("versions"),
            "data_path_used": distinct("data_path_used")}


def _machine(engine: Engine, runs, hosts: dict[str, str] | None = None,
             interconnect: dict[str, str] | None = None) -> dict[str, Any]:
    from workloads.hardware import describe

    out: dict[str, Any] = {}
    versions = [v for v in runs.get("versions", []) if isinstance(v, dict)]
    hardware = [v["host"] for v in versions if isinstance(v.get("host"), dict)]
    out["hardware"] = [dict(h, described=describe(h)) for i, h in enumerate(hardware) if h not in hardware[:i]]
    out["gpu_driver"] = sorted({str(v["driver"]) for v in versions if v.get("driver")})
    out["interconnect"] = interconnect or {}
    for column in ("site", "hosts", "host_cpus", "gpu_model", "gpus", "nccl_network", "nccl_plugin", "host_load"):
        if column in runs:
            out[column] = sorted({str(v) for v in runs[column].dropna()})
    if hosts and "hosts" in out:   # by role (``places``), as the database has them
        out["hosts"] = sorted({",".join(hosts.get(h.strip(), "node?") for h in v.split(",")) for v in out["hosts"]})
    from results_db.analysis.network import fit_network, measurements

    measured = {}
    for site in out.get("site", []):
        try:
            fit = fit_network(measurements(engine, site))
        except ValueError:
            fit = None
        if fit is not None:
            measured[site] = fit.describe()
    out["network_measured"] = measured
    return out


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, default=str, sort_keys=True) + "\n", encoding="utf-8")


def _write_manifest(out: Path, study: str, runs: int) -> None:
    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = str(path.relative_to(out))
        if rel.startswith(DATABASE + "-"):   # SQLite's -wal/-shm of the closed database, if any remain
            continue
        files[rel] = sha256(path)
    _write_json(out / MANIFEST, {"format": ARTIFACT_FORMAT, "study": study, "runs": runs, "files": files,
                                 "written": datetime.now(timezone.utc).isoformat()})


@dataclass(frozen=True)
class Opened:
    folder: Path
    study: str
    url: str
    manifest: dict[str, Any]

    def sites(self) -> list[str]:
        """The sites its runs' configs name: a re-run sweeps on one (``sweep`` takes its site from the
        command line, not from each run's file)."""
        found = set()
        for path in sorted((self.folder / "conf" / "study").glob("run_*.yaml")):
            site = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("site")
            if site:
                found.add(str(site))
        return sorted(found)


# what SQLite may leave beside a database it opened: not files of the artifact's, and not tampering
_SQLITE_SIDE_FILES = ("-journal", "-wal", "-shm")


def unpack_archive(path: Path) -> Path:
    """The artifact folder inside ``pack --archive``'s tarball, extracted into a new temporary
    folder (``tarfile``'s "data" filter: no absolute paths, links out of it or device files)."""
    import atexit
    import tempfile

    try:
        with tarfile.open(path) as fh:
            members = fh.getmembers()
            tops = {Path(m.name).parts[0] for m in members if m.name not in ("", ".")}
            if len(tops) != 1:
                raise ArtifactError(f"{path}: a tarball of {len(tops)} top-level entries, not one artifact folder")
            unsafe = [m.name for m in members if Path(m.name).is_absolute() or ".." in Path(m.name).parts
                      or not (m.isfile() or m.isdir())]
            if unsafe:   # what the "data" filter refuses, checked on Pythons that lack it (before 3.10.12)
                raise ArtifactError(f"{path}: {unsafe[0]} is not a plain file or folder inside the artifact")
            where = Path(tempfile.mkdtemp(prefix="scalestudy-artifact-"))
            atexit.register(shutil.rmtree, where, True)   # the command's own copy: gone when it ends
            if hasattr(tarfile, "data_filter"):
                fh.extractall(where, filter="data")
            else:
                fh.extractall(where)
    except (tarfile.TarError, OSError) as exc:
        raise ArtifactError(f"{path}: not a readable artifact tarball ({exc})") from None
    return where / tops.pop()


def open_artifact(folder: Path) -> Opened:
    """Check an artifact folder (or ``pack --archive``'s tarball of one) before anything uses it:
    its manifest, every file's digest, no file the manifest does not list, the database's
    integrity; one line naming what is wrong."""
    folder = Path(folder)
    if folder.is_file() and tarfile.is_tarfile(folder):
        folder = unpack_archive(folder)
    manifest_path = folder / MANIFEST
    if not folder.is_dir() or not manifest_path.is_file():
        raise ArtifactError(f"{folder}: not an artifact (no {MANIFEST}; `scalestudy artifact pack` writes one)")
    try:
        manifest = json.loads(manifest_path.read_text())
        files, study = manifest["files"], manifest["study"]
    except (ValueError, KeyError, TypeError):
        raise ArtifactError(f"{manifest_path}: not an artifact manifest") from None
    if manifest.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"{folder}: artifact format {manifest.get('format')!r}; this scalestudy reads {ARTIFACT_FORMAT}")
    for rel, digest in files.items():
        path = folder / rel
        if not path.is_file():
            raise ArtifactError(f"{folder}: {rel} is missing")
        if sha256(path) != digest:
            raise ArtifactError(f"{folder}: {rel} differs from the artifact's manifest (damaged or edited)")
    listed = {*files, MANIFEST}
    extra = sorted(rel for rel in (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
                   if rel not in listed and not rel.endswith(_SQLITE_SIDE_FILES))
    if extra:
        raise ArtifactError(f"{folder}: {extra[0]} is not in the artifact's manifest"
                            + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "") + " (added since it was packed)")
    url = f"sqlite:///{(folder / DATABASE).absolute()}"
    from results_db.store.connect import sqlite_integrity

    try:
        ok = sqlite_integrity(folder / DATABASE)
    except Exception as exc:   # noqa: BLE001 - not a database at all
        raise ArtifactError(f"{folder}: {DATABASE} is not a readable SQLite database ({type(exc).__name__})") from None
    if ok != "ok":
        raise ArtifactError(f"{folder}: {DATABASE} is damaged (SQLite's integrity check: {ok})")
    return Opened(folder, study, url, manifest)
