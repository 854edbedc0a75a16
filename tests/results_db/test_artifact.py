"""A study as an artifact (``scalestudy artifact``): packed into a folder that every reading command
opens as a database, checked, imported into another database without loss, and re-run end to end
on the local Slurm cluster with the comparison saying "reproduced" for an unchanged configuration
and "slower" for one deliberately slowed; bad input one line, exit 2, nothing written."""

from __future__ import annotations

import shutil

import pytest
from sqlalchemy import func, select

from results_db import connect
from results_db.store import query
from results_db.store.schema import Eval, Run, Step
from results_db.store.study_copy import run_tables

from conftest import scalestudy

# a command workload whose rate is 100 (x 0.7 when a marker file for its node count exists), with
# 1 % noise: the re-run can be slowed for one configuration without changing any configuration.
# The marker's path comes from the environment: the configuration names no folder of the test's
PROGRAM = ("import json, os, random; s = json.load(open('spec.json')); "
           "slow = os.path.exists(os.environ.get('ART_MARKER', '/nonexistent') + '-%d' % s['nodes']); "
           "print('rate: %.4f' % (100 * (0.7 if slow else 1.0) * (1 + 0.01 * random.gauss(0, 1))))")


def _marker_env(tmp_path) -> dict[str, str]:
    return {"ART_MARKER": str(tmp_path / "slow")}


def _sweep(tmp_path, study: str, *extra: str, site: str = "local"):
    marker = tmp_path / "slow"
    proc = scalestudy("sweep", f"study_name={study}", f"site={site}", "nodes=1,2", "workers_per_node=1",
                      "repeat=0,1,2", "workload.kind=command",
                      f"workload.command=[python3,-c,\"{PROGRAM}\"]",
                      "+workload.metrics.throughput.pattern='rate: ([0-9.]+)'", *extra,
                      f"hydra.sweep.dir={tmp_path / 'mr' / study}", cwd=tmp_path, timeout=900,
                      env=_marker_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return marker


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """One local study of 6 runs (one with a timeline of the built-in loop), packed."""
    tmp = tmp_path_factory.mktemp("art")
    _sweep(tmp, "orig")
    tl = scalestudy("sweep", "study_name=orig", "nodes=1", "workers_per_node=2", "epochs=1", "steps_per_epoch=3",
                    "timeline=true", "account=secret_project", f"hydra.sweep.dir={tmp / 'mr' / 'tl'}", cwd=tmp)
    assert tl.returncode == 0, tl.stderr[-3000:]
    proc = scalestudy("artifact", "pack", "--study", "orig", "--out", str(tmp / "art"), "--archive", cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp


@pytest.mark.sweep
def test_the_artifact_is_a_database_every_reading_command_opens(packed):
    art = packed / "art"
    for name in ("results.db", "manifest.json", "README.md", "sweeps.txt", "software.json", "machine.json",
                 "site/local.yaml", "report/index.html"):
        assert (art / name).is_file(), name
    assert (packed / "art.tar.gz").stat().st_size > 10_000
    db = f"sqlite:///{art / 'results.db'}"
    source, copy = connect(f"sqlite:///{packed / 'scalestudy.db'}"), connect(db)
    # every table's rows of the study, counted on both sides: nothing lost
    ids = [int(i) for i in query.runs(source, study="orig", attempts="all")["run_id"]]
    for table in run_tables():
        with source.connect() as a, copy.connect() as b:
            assert a.execute(select(func.count()).select_from(table).where(table.c.run_id.in_(ids))).scalar() == \
                b.execute(select(func.count()).select_from(table)).scalar(), table.name
    assert len(query.runs(copy, study="orig")) == 7
    with copy.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Step)).scalar() > 0
        assert conn.execute(select(func.count()).select_from(Eval)).scalar() > 0
    # the timeline run's events came along, renamed under the artifact's own database id, and read
    [tl] = [int(r) for r, t in zip(*[query.runs(copy, study="orig")[c] for c in ("run_id", "timeline")]) if t]
    assert len(query.events(copy, [tl])) > 0
    with copy.connect() as conn:
        name = conn.execute(select(Run.events_file).where(Run.id == tl)).scalar()
    assert (art / "results.db.events" / name).exists()
    for command in (("query", "--study", "orig"), ("compare", "--study", "orig", "--baseline", "nodes=1"),
                    ("status",), ("timeline", str(tl), "--out", str(packed / "t.json"))):
        proc = scalestudy(*command, "--db", db, cwd=packed)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
    # secrets: no account unless asked; the configs re-run as they ran
    everything = "".join(p.read_text(errors="replace") for p in art.rglob("*") if p.suffix in (".yaml", ".json", ".txt", ".md"))
    assert "secret_project" not in everything
    assert "secret_project" not in " ".join(str(c) for c in query.runs(copy, study="orig")["config"])
    assert len(list((art / "conf" / "study").glob("run_*.yaml"))) == 7
    assert "scalestudy sweep study_name=orig" in (art / "sweeps.txt").read_text()
    check = scalestudy("artifact", "check", str(art), cwd=packed)
    assert check.returncode == 0 and "every digest as written" in check.stdout


@pytest.mark.sweep
def test_bad_artifacts_are_one_line_and_nothing_is_written(packed, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    damaged = tmp_path / "damaged"
    shutil.copytree(packed / "art", damaged)
    with open(damaged / "results.db", "r+b") as fh:   # a page of the database overwritten
        fh.seek(4096)
        fh.write(b"\xff" * 4096)
    cases = [(("artifact", "check", str(plain)), "not an artifact"),
             (("artifact", "check", str(damaged)), "differs from the artifact's manifest"),
             (("artifact", "rerun", str(plain)), "not an artifact"),
             (("artifact", "import", str(damaged), "--db", f"sqlite:///{tmp_path / 'x.db'}"), "differs"),
             (("artifact", "pack", "--study", "nosuch", "--db", f"sqlite:///{packed / 'scalestudy.db'}",
               "--out", str(tmp_path / "o")), "nosuch"),
             (("artifact", "pack", "--study", "orig", "--db", f"sqlite:///{packed / 'scalestudy.db'}",
               "--out", str(packed / "art")), "not an empty folder"),
             (("artifact", "rerun", str(packed / "art"), "site=nosuch_site"), None)]
    for args, said in cases[:-1]:
        proc = scalestudy(*args, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and said in proc.stderr, (args, proc.stderr)
    assert not (tmp_path / "o").exists() and not (tmp_path / "x.db").exists()
    # a site that does not exist: the sweep refuses it in one line, and no run is recorded anywhere
    proc = scalestudy(*cases[-1][0], "--db", f"sqlite:///{tmp_path / 'y.db'}", cwd=tmp_path)
    assert proc.returncode == 2 and "nosuch_site" in proc.stderr
    assert not (tmp_path / "y.db").exists() or query.runs(connect(f"sqlite:///{tmp_path / 'y.db'}")).empty


@pytest.mark.sweep
def test_a_rerun_is_checked_before_it_runs_and_a_tarball_is_an_artifact(packed, tmp_path):
    """Issue 62: a metric misspelt was found only after the whole sweep ran; the original's own
    name was accepted; the tarball was "not an artifact"; --archive overwrote a tarball; check
    --help was read as a folder; check passed a folder with a file added. Each refused (or
    accepted) in one line, with nothing run and nothing written."""
    db = f"sqlite:///{tmp_path / 'rerun.db'}"
    for args, said in ((("--metric", "througput"), "did you mean 'throughput'"),
                       (("--metric", "metrics.nosuch"), "declares no direction"),
                       (("--study-name", "orig"), "the artifact's own study")):
        proc = scalestudy("artifact", "rerun", str(packed / "art"), *args, "--db", db, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "rerun.db").exists() and not (tmp_path / "multirun").exists()
    priced = scalestudy("artifact", "rerun", str(packed / "art" ), "--dry-run", "--db", db, cwd=tmp_path)
    assert priced.returncode == 0 and "dry run" in (priced.stdout + priced.stderr).lower(), priced.stderr[-2000:]
    assert "node-hours" in priced.stdout + priced.stderr
    assert not (tmp_path / "rerun.db").exists() or query.runs(connect(db)).empty   # nothing ran, nothing recorded
    tarball = packed / "art.tar.gz"
    ok = scalestudy("artifact", "check", str(tarball), cwd=tmp_path)
    assert ok.returncode == 0 and "every digest as written" in ok.stdout, ok.stderr
    again = scalestudy("artifact", "pack", "--study", "orig", "--db", f"sqlite:///{packed / 'scalestudy.db'}",
                       "--out", str(packed / "art"), "--archive", cwd=tmp_path)
    assert again.returncode == 2 and "art.tar.gz exists" in again.stderr
    assert scalestudy("artifact", "check", "--help", cwd=tmp_path).returncode == 0
    added = tmp_path / "added"
    shutil.copytree(packed / "art", added)
    (added / "conf" / "extra.yaml").write_text("x: 1\n")
    proc = scalestudy("artifact", "check", str(added), cwd=tmp_path)
    assert proc.returncode == 2 and "conf/extra.yaml is not in the artifact's manifest" in proc.stderr


@pytest.mark.sweep
def test_no_packed_file_names_the_working_folder_or_a_host(packed, tmp_path):
    """Issue 62: run folders held absolute paths (the working folder; on Polaris a project's
    path), the driver its host and PID, the report and its figures the working folder. Every
    packed file, the database's bytes included, is searched for the folder the study ran in; the
    database's hosts are roles. The control: ``--with-places`` keeps them, and the search finds them."""
    import re

    def leaks(folder, needle: str) -> list[str]:
        return sorted(str(f.relative_to(folder)) for f in folder.rglob("*")
                      if f.is_file() and needle.encode() in f.read_bytes())

    # the folder the runs ran in (the sweeps' hydra.sweep.dir)
    working = str(packed / "mr")
    assert leaks(packed / "art", working) == []
    engine = connect(f"sqlite:///{packed / 'art' / 'results.db'}", upgrade=False)
    with engine.connect() as conn:
        rows = conn.execute(select(Run.run_dir, Run.driver, Run.hosts)).all()
    engine.dispose()
    assert all(not str(d).startswith("/") for d, _, _ in rows)
    assert {drv for _, drv, _ in rows} <= {"driver", None}
    assert all(re.fullmatch(r"node\d+(,node\d+)*", h) for _, _, h in rows if h)
    kept = scalestudy("artifact", "pack", "--study", "orig", "--db", f"sqlite:///{packed / 'scalestudy.db'}",
                      "--out", str(tmp_path / "kept"), "--with-places", "--no-report", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert "results.db" in leaks(tmp_path / "kept", working)


def test_an_import_keeps_every_run_and_refuses_a_clash(packed, tmp_path, db_url, monkeypatch):
    """Into a SQLite file and into a team's PostgreSQL (its timelines under $SCALESTUDY_EVENTS_DIR,
    which a PostgreSQL database needs for them; without it the import refuses in one line)."""
    db = db_url
    env = None
    if db.startswith("postgresql"):
        refused = scalestudy("artifact", "import", str(packed / "art"), "--db", db, cwd=tmp_path)
        assert refused.returncode == 2 and "SCALESTUDY_EVENTS_DIR" in refused.stderr, refused.stderr
        env = {"SCALESTUDY_EVENTS_DIR": str(tmp_path / "events")}
        monkeypatch.setenv("SCALESTUDY_EVENTS_DIR", env["SCALESTUDY_EVENTS_DIR"])   # query.events below reads it
    proc = scalestudy("artifact", "import", str(packed / "art"), "--db", db, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    team, art = connect(db), connect(f"sqlite:///{packed / 'art' / 'results.db'}")
    mine, theirs = query.runs(team, study="orig", attempts="all"), query.runs(art, study="orig", attempts="all")
    assert sorted(mine["run_key"]) == sorted(theirs["run_key"])       # the runs' identities kept
    assert sorted(mine["throughput"].dropna()) == sorted(theirs["throughput"].dropna())
    [tl] = [int(r) for r, t in zip(mine["run_id"], mine["timeline"]) if t]
    assert len(query.events(team, [tl])) > 0
    again = scalestudy("artifact", "import", str(packed / "art"), "--db", db, cwd=tmp_path, env=env)
    assert again.returncode == 2 and "already in" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert len(query.runs(team, study="orig", attempts="all")) == len(mine)   # nothing written


def places_in(folder, working) -> dict[str, list[str]]:
    """Which packed files name the user's places: the working folder, the home folder, the user's
    name as a path component, this host's name as a word (text files as text; the database as the
    text of its rows, ``iterdump``; a figure's compressed bytes can hold any two letters)."""
    import getpass
    import os
    import re
    import socket
    import sqlite3

    needles = {"working folder": re.compile(re.escape(str(working))),
               "home": re.compile(re.escape(os.path.expanduser("~").rstrip("/")) + "/"),
               "user": re.compile("/" + re.escape(getpass.getuser()) + r"(/|\b)"),
               "host": re.compile(r"(?<![\w.-])" + re.escape(socket.gethostname()) + r"(?![\w-])")}
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix in (".png", ".gz") or path.name == "manifest.json":
            continue
        if path.suffix == ".db":
            with sqlite3.connect(path) as conn:
                text = "\n".join(conn.iterdump())
            conn.close()
        else:
            text = path.read_text(errors="replace")
        for what, pattern in needles.items():
            if pattern.search(text):
                found.setdefault(what, []).append(str(path.relative_to(folder)))
    return found


@pytest.mark.mpi
@pytest.mark.slurm
def test_a_slurm_study_packed_moved_and_rerun_says_what_reproduced(tmp_path):
    """The issue's end-to-end case on the local Slurm cluster: packed, moved, re-run from the moved
    folder; the 1-node configuration unchanged reads "reproduced", the 2-node one, slowed to 0.7 of
    its rate by a marker file its program reads (its configuration unchanged), "slower". Packed,
    no file of it names the user's working folder, home, user name or host (``places_in``); the
    control, packed ``--with-places``, names them."""
    marker = _sweep(tmp_path, "slurm_orig", site="local_slurm")
    pack = scalestudy("artifact", "pack", "--study", "slurm_orig", "--out", str(tmp_path / "a1"), "--no-report",
                      cwd=tmp_path)
    assert pack.returncode == 0, pack.stderr[-2000:]
    assert places_in(tmp_path / "a1", tmp_path) == {}
    assert len(list((tmp_path / "a1" / "runs").glob("*/command.txt"))) == 6   # the launch lines, packed
    kept = scalestudy("artifact", "pack", "--study", "slurm_orig", "--out", str(tmp_path / "kept"), "--no-report",
                      "--with-places", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr[-2000:]
    found = places_in(tmp_path / "kept", tmp_path)
    assert {"working folder", "host"} <= set(found), found
    moved = tmp_path / "elsewhere" / "artifact"
    shutil.move(str(tmp_path / "a1"), moved)
    marker.with_name(marker.name + "-2").touch()   # the 2-node runs of the re-run are slowed
    proc = scalestudy("artifact", "rerun", str(moved), "--study-name", "slurm_again", "--tolerance", "0.1",
                      cwd=tmp_path, timeout=900, env=_marker_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    import pandas as pd

    table = pd.read_csv(tmp_path / "reports" / "slurm_again" / "reproduction-slurm_again.csv").set_index("nodes")
    assert not (tmp_path / "reproduction-slurm_again.csv").exists()   # not into the working folder (issue 62)
    assert table.loc[1, "reproduction"] == "reproduced", table
    assert table.loc[2, "reproduction"] == "slower", table
    assert "1 reproduced, 1 slower" in proc.stdout
    html = (tmp_path / "reports" / "slurm_again" / "index.html").read_text()
    assert "the artifact" in html and "reproduced" in html


def test_a_recorded_command_leaves_accounts_out_however_they_were_written():
    """``account=``, ``+account=`` and a quoted value with a space: none survives in what an artifact
    writes, unless the packer asked for accounts; every other word is kept as recorded."""
    from results_db.publish.scrub import shareable_command

    for given in ("scalestudy sweep nodes=1 account=secret_project", "scalestudy sweep nodes=1 +account=secret_project",
                  "scalestudy sweep nodes=1 'account=secret project'"):
        shared = shareable_command(given, with_accounts=False)
        assert "secret" not in shared and "account=<left out>" in shared and shared.startswith("scalestudy sweep nodes=1 ")
        assert shareable_command(given, with_accounts=True) == given


@pytest.mark.mpi
@pytest.mark.slurm
def test_an_artifact_of_two_sites_is_rerun_on_one_named(tmp_path):
    """A study swept on two sites: its re-run asks which, in one line, exit 2, no run recorded."""
    for site in ("local", "local_slurm"):
        proc = scalestudy("sweep", "study_name=two", f"site={site}", "nodes=1", "workers_per_node=1",
                          "workload.kind=command", "workload.command=[echo,hi]",
                          f"hydra.sweep.dir={tmp_path / 'mr' / site}", cwd=tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    pack = scalestudy("artifact", "pack", "--study", "two", "--out", str(tmp_path / "a"), "--no-report", cwd=tmp_path)
    assert pack.returncode == 0, pack.stderr[-2000:]
    db = f"sqlite:///{tmp_path / 'again.db'}"
    proc = scalestudy("artifact", "rerun", str(tmp_path / "a"), "--study-name", "again", "--db", db, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "local, local_slurm" in lines[0], proc.stderr
    assert not (tmp_path / "again.db").exists() or query.runs(connect(db)).empty


def test_a_shallow_root_is_never_replaced_and_an_unsafe_tarball_is_refused(tmp_path):
    """Run folders with no common root deeper than "/scratch" keep their paths (replacing "/" in
    every recorded command would mangle them); a tarball with a member outside its folder (the
    "data" filter's refusal, checked on Pythons without it) is refused in one line, nothing written."""
    import io
    import tarfile

    import pandas as pd

    from results_db.publish.artifact import ArtifactError, unpack_archive
    from results_db.publish.scrub import places

    runs = pd.DataFrame({"run_dir": ["/home/a/mr/0", "/scratch/b/mr/1"], "hosts": ["nid1,nid2", "nid2"]})
    root, hosts = places(runs)
    assert root is None and hosts == {"nid1": "node0", "nid2": "node1"}
    assert places(pd.DataFrame({"run_dir": ["/home/a/mr/s/0", "/home/a/mr/s/1"]}))[0] == "/home/a/mr/s"
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as fh:
        data = b"x"
        info = tarfile.TarInfo("art/../../evil")
        info.size = len(data)
        fh.addfile(info, io.BytesIO(data))
    with pytest.raises(ArtifactError, match="not a plain file or folder inside"):
        unpack_archive(bad)
    assert not (tmp_path.parent / "evil").exists()


@pytest.mark.sweep
def test_the_artifact_answers_an_evaluation_checklist(packed):
    """Issue 62, point by point as SC's and PPoPP's artifact appendices ask: how to get and install
    the software (commit, the install and check commands), the hardware as the ranks read it, each
    configuration's cost and expected result with its tolerance, how to check and re-run; the launch
    lines, per-rank metrics and logs with their cap said; flat CSVs of runs and steps whose numbers
    are the database's; configurations as they ran (``device: auto`` that ran on ``cpu``)."""
    import json

    import pandas as pd

    from results_db.publish.run_files import FILE_CAP
    from workloads.hardware import host_hardware

    art = packed / "art"
    readme = (art / "README.md").read_text()
    for said in ("## Getting and installing the software", "git checkout", "bash scripts/setup-env.sh",
                 "scalestudy artifact check", "## Hardware, as the runs' ranks measured it", "node-hours",
                 "mean [95 %]", "within ±10%", "rerun . --dry-run", f"cut at {FILE_CAP >> 20} MiB"):
        assert said in readme, said
    here = host_hardware()
    assert here["cpu_model"] in readme and f"kernel {here['kernel']}" in readme   # the ranks' host: this one
    machine = json.loads((art / "machine.json").read_text())
    assert machine["hardware"][0]["cores"] == here["cores"] and machine["interconnect"]["local"]
    runs = pd.read_csv(art / "runs.csv")
    steps = pd.read_csv(art / "steps.csv")
    db = connect(f"sqlite:///{art / 'results.db'}", upgrade=False)
    assert sorted(runs["throughput"].dropna()) == sorted(query.runs(db, study="orig", attempts="all")["throughput"].dropna())
    assert len(steps) == len(query.steps(db, list(runs["run_id"]))) > 0
    db.dispose()
    for run_id in runs["run_id"]:
        assert (art / "runs" / str(run_id) / "command.txt").is_file()
    [timeline] = [r for r in runs.to_dict("records") if r["timeline"]]
    folder = art / "runs" / str(timeline["run_id"])
    assert {p.name for p in (folder / "metrics").iterdir()} == {"rank-0.jsonl", "rank-1.jsonl"}
    assert (folder / "workload.log").is_file()
    config = (art / "conf" / "study" / f"run_{timeline['run_id']}.yaml").read_text()
    assert "device: cpu" in config and "# resolved at the run: device auto -> cpu" in config


def test_a_run_file_past_the_cap_is_cut_at_a_line_and_says_so(tmp_path, monkeypatch):
    """The cap (``FILE_CAP``): a 3-line file over it keeps its whole first lines and says how many
    bytes more the original had; a file under it is copied as it is."""
    import pandas as pd

    from results_db.publish import run_files

    monkeypatch.setattr(run_files, "FILE_CAP", 26)
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    (run / "workload.log").write_text("line one is long\nline two\nline three\n")
    (run / "metrics" / "rank-0.jsonl").write_text("{}\n")
    packed = run_files.pack_run_files(pd.DataFrame([{"run_id": 7, "run_dir": str(run)}]), tmp_path / "out",
                                      lambda text: text)
    log = (tmp_path / "out" / "runs" / "7" / "workload.log").read_text()
    assert log.startswith("line one is long\nline two\n[scalestudy artifact pack: cut here")
    assert "11 bytes more" in log and packed.cut == ["runs/7/workload.log"]
    assert (tmp_path / "out" / "runs" / "7" / "metrics" / "rank-0.jsonl").read_text() == "{}\n"



def test_an_unreadable_run_file_is_left_out_and_said(tmp_path, monkeypatch):
    """A run file the packer cannot read (permissions; root reads anything, so the read is made to
    fail) is left out and named with its reason, not a traceback that leaves no artifact."""
    import pandas as pd

    from results_db.publish import run_files

    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    (run / "workload.log").write_text("fine\n")
    (run / "metrics" / "rank-0.jsonl").write_text("{}\n")
    real = run_files._capped_text
    monkeypatch.setattr(run_files, "_capped_text", lambda p: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
                        if p.name == "rank-0.jsonl" else real(p))
    packed = run_files.pack_run_files(pd.DataFrame([{"run_id": 4, "run_dir": str(run)}]), tmp_path / "out",
                                      lambda text: text)
    assert (tmp_path / "out" / "runs" / "4" / "workload.log").read_text() == "fine\n"
    assert packed.unreadable == ["4/metrics/rank-0.jsonl (Permission denied)"] and packed.files == 1
