"""``scalestudy sweep``: a Hydra multirun of the app, each error one line, or a detached driver."""

from __future__ import annotations

from workloads.plural import counted

import os
import sys
from pathlib import Path
from typing import Sequence

from workloads.did_you_mean import hint

from .common import fail

# the studies shipped with scalestudy (study=NAME)
STUDIES_DIR = Path(__file__).resolve().parent.parent / "sweep" / "conf" / "study"


def sweep(argv: Sequence[str]) -> int:
    """Hydra multirun of the app. Errors come back here (not to Hydra's reporter) so
    that each is one line; set HYDRA_FULL_ERROR=1 for Hydra's full traces instead."""
    args = list(argv)
    if "--help" in args or "-h" in args:
        print(sweep_help(args))
        return 0
    refused = refused_argument(args)
    if refused:
        return fail(refused)
    if "--show-scripts" in args and "--dry-run" not in args:
        return fail("--show-scripts prints a dry run's batch scripts: give it with --dry-run")
    # Run folders, logs, specs and the SQLite file are the user's alone: login nodes are shared
    # (batch jobs set the same umask in their set-up; docs/how-to/sites.md, "Files and permissions").
    os.umask(0o077)
    # Runs execute in folders of their own: a relative PYTHONPATH entry (PYTHONPATH=examples/x, as the
    # tutorial writes it) would import on this node and nowhere else; it means where the sweep started.
    if os.environ.get("PYTHONPATH"):
        os.environ["PYTHONPATH"] = absolute_pythonpath(os.environ["PYTHONPATH"], os.getcwd())
    # A database URL may hold a password: keep it out of Hydra's config, which Hydra
    # writes into every run folder (and out of a detached driver's command line): a detached
    # driver gets it in its environment; this process holds it in memory, out of the
    # environment that its MPI jobs, batch jobs and Parsl's processes inherit.
    from results_db.store.connect import DB_URL_ENV, db_url_held

    for arg in [a for a in args if a.startswith("db_url=")]:
        os.environ[DB_URL_ENV] = arg.split("=", 1)[1].strip("'\"")
        args.remove(arg)
    if "--detach" in args:
        return detach([a for a in args if a != "--detach"])
    from ..sweep.versions import untested

    problem = untested("hydra-core")   # Parsl's is checked once the site is known (admission)
    if problem:
        return fail(problem)
    full_errors = bool(os.environ.get("HYDRA_FULL_ERROR"))
    os.environ["HYDRA_FULL_ERROR"] = "1"
    for flag, override in (("--rerun", "rerun=true"), ("--dry-run", "dry_run=true"),
                           ("--show-scripts", "show_scripts=true")):
        if flag in args:
            args = [a for a in args if a != flag] + [override]
    args = flags_first(args)   # Hydra's parser takes its overrides in one run, after the flags
    hydra_flags = {"-m", "--multirun", "--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion"}
    if not hydra_flags.intersection(args):
        args = ["--multirun", *args]
    sys.argv = ["scalestudy", *args]
    with db_url_held():
        code = _run_hydra(full_errors)
    return code if code is not None else _exit_status()


def _run_hydra(full_errors: bool) -> int | None:
    """Run the Hydra app; an exit status if it stopped with an error or was interrupted."""
    import signal

    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from .. import driver_timing
    from ..errors import ConfigError, ScalestudyError
    from ..sweep import outcome
    from ..sweep.app import sweep_job

    def _terminate(signum, _frame):  # a detached driver is stopped with SIGTERM: clean up as for Ctrl-C
        raise KeyboardInterrupt

    outcome.take()   # none left from an earlier sweep of this process
    signal.signal(signal.SIGTERM, _terminate)
    try:
        with driver_timing.timed("hydra_total"):
            sweep_job()
    except KeyboardInterrupt:
        ended = outcome.take()
        print(f"interrupted: {counted(ended.done if ended else 0, 'run')} done, {ended.stopped if ended else 0} stopped; rerun "
              "the same command to resume", file=sys.stderr)
        return 130
    except yaml.YAMLError as exc:   # a study or config file that is not YAML
        if full_errors:
            raise
        mark = getattr(exc, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a config file"
        print(f"scalestudy: error: invalid config: {where}: not valid YAML ({getattr(exc, 'problem', None) or exc})",
              file=sys.stderr)
        return 2
    except (ScalestudyError, HydraException, OmegaConfBaseException) as exc:
        if full_errors:
            raise
        if isinstance(exc, ScalestudyError):
            print(f"scalestudy: error: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, ConfigError) else 1
        print(f"scalestudy: error: {one_line(exc)}", file=sys.stderr)
        return 2
    driver_timing.write()
    return None


def _exit_status() -> int:
    """1 when runs failed or are not in the database, else 0."""
    from ..sweep import outcome

    ended = outcome.take()
    if ended and ended.not_ingested:
        print(f"scalestudy: {ended.not_ingested} finished runs could not be ingested (database unreachable); "
              "`scalestudy ingest` brings them in", file=sys.stderr)
        return 1
    if ended and ended.failed:
        print(f"scalestudy: {ended.failed} of {counted(ended.submitted, 'run')} failed; their reasons: "
              f"scalestudy status --study {ended.study} --failed", file=sys.stderr)
        return 1
    return 0


# Hydra's own flags (hydra/_internal/utils.py get_args_parser, documented in `--hydra-help`), and ours
_HYDRA_FLAGS = ("--hydra-help", "--version", "--cfg", "-c", "--resolve", "--package", "-p", "--run", "-r",
                "--multirun", "-m", "--shell-completion", "-sc", "--config-path", "-cp", "--config-name", "-cn",
                "--config-dir", "-cd", "--experimental-rerun", "--info", "-i")
_OUR_FLAGS = ("--rerun", "--dry-run", "--show-scripts", "--detach")
_TAKES_VALUE = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir",
                "-cd", "--experimental-rerun", "--info", "-i")


def refused_argument(args: Sequence[str]) -> str | None:
    """One line for what Hydra would answer with its whole usage or a hint that does not apply:
    a flag neither we nor Hydra know, a word that is no KEY=VALUE, and a choice of Hydra's
    launcher or sweeper (ours submit, record and resume the runs: another would bypass them)."""
    after_flag = False
    for arg in args:
        if after_flag:
            after_flag = False
            continue
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            if name not in _HYDRA_FLAGS + _OUR_FLAGS:
                return (f"unknown flag {arg!r}; sweep's flags: --rerun, --dry-run, --show-scripts, --detach, "
                        "--config-dir DIR, --cfg job (scalestudy sweep --help)")
            after_flag = name in _TAKES_VALUE and "=" not in arg
            continue
        key = arg.split("=", 1)[0].removeprefix("override ").lstrip("+~")
        if key in ("hydra/launcher", "hydra/sweeper"):
            return (f"{arg}: scalestudy's sweeps run through its own Hydra {key.split('/')[1]} (it submits, records "
                    "and resumes the runs); choose where runs go with site=NAME (scalestudy sites lists them)")
        if "=" not in arg and not arg.startswith("~"):   # ~KEY: Hydra's deletion
            return (f"{arg!r}: an override is KEY=VALUE (e.g. nodes=2 or study=eager_sgd); scalestudy sweep --help "
                    "lists the keys")
    return None


def flags_first(args: Sequence[str]) -> list[str]:
    """Flags (with their values) before the KEY=VALUE overrides: ``study_name=x --config-dir DIR
    --dry-run`` would otherwise leave an override after a flag, which Hydra's parser refuses."""
    flags: list[str] = []
    overrides: list[str] = []
    takes_value = False
    for arg in args:
        if takes_value:
            flags.append(arg)
            takes_value = False
        elif arg.startswith("-"):
            flags.append(arg)
            takes_value = arg.split("=", 1)[0] in _TAKES_VALUE and "=" not in arg
        else:
            overrides.append(arg)
    return flags + overrides


def one_line(exc: BaseException) -> str:
    """Hydra's and OmegaConf's multi-line messages, folded to the line a user needs."""
    from hydra.errors import MissingConfigException, OverrideParseException

    from ..sweep.schema import explain_unknown_key

    if isinstance(exc, OverrideParseException):
        return (f"invalid override {exc.override!r}: Hydra cannot parse it (quote a value that holds spaces or "
                "; $ ( ) ` characters: key='value')")
    unknown = explain_unknown_key(str(exc))
    if unknown:
        return unknown
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in exc.missing_cfg_file:
        group, _, name = exc.missing_cfg_file.rpartition("/")
        known = ", ".join(exc.options or [])
        return (f"invalid config: {group}={name!r}: unknown {group}" + (hint(name, known.split(", ")) if known else "")
                + (f"; known: {known}" if known else ""))
    lines = []
    for line in str(exc).strip().splitlines():
        line = line.strip()
        if not line or line.startswith(("full_key:", "object_type=", "Config search path")):
            break
        lines.append(line)
    return " ".join(lines) or type(exc).__name__


def config_dirs(args: Sequence[str]) -> list[Path]:
    dirs = []
    for i, arg in enumerate(args):
        if arg in ("--config-dir", "-cd") and i + 1 < len(args):
            dirs.append(Path(args[i + 1]))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.split("=", 1)[1]))
    return dirs


def absolute_pythonpath(value: str, cwd: str) -> str:
    """Each relative entry of a PYTHONPATH made absolute against ``cwd`` (empty entries kept)."""
    return os.pathsep.join(p if not p or os.path.isabs(p) else os.path.normpath(os.path.join(cwd, p))
                           for p in value.split(os.pathsep))


def sweep_help(args: Sequence[str] = ()) -> str:
    """``scalestudy sweep --help``: our flags, every key with its default, and what exists to choose from."""
    import textwrap

    from workloads.registry import ALGORITHMS, DATASETS, MODELS, registered

    from ..site.config import known_sites, load_site
    from ..sweep.schema import key_help

    studies = {p.stem: "shipped" for p in STUDIES_DIR.glob("*.yaml")}
    for folder in config_dirs(args):
        studies.update({p.stem: str(folder) for p in (folder / "study").glob("*.yaml")})
    lines = [
        "usage: scalestudy sweep [--rerun] [--dry-run [--show-scripts]] [--detach] [--config-dir DIR] [KEY=VALUE ...]",
        "",
        "Runs a study's sweep: every job of the Hydra multirun is one run, submitted through Parsl to the",
        "site's scheduler and MPI launcher; results go to the results database.",
        "",
        "flags:",
        "  --rerun              run again even runs already done: a new attempt each; the earlier results are",
        "                       kept (readers show the latest; query --attempts all shows every one)",
        "  --dry-run            validate and submit nothing: a summary first (runs, node-hours, queues, batch",
        "                       jobs, what the preset gives, warnings), then each run's launch line; the batch",
        "                       scripts are written to files whose folder it names",
        "  --show-scripts       with --dry-run: print the batch scripts too",
        "  --detach             validate here, then drive the sweep from a background process (see its log)",
        "  --config-dir DIR     also read studies from DIR/study/*.yaml (your own studies)",
        "  --cfg job            print the composed config of the first job and exit",
        "",
        "keys (KEY=VALUE, or KEY=V1,V2,... to sweep; +params.NAME=VALUE adds a free parameter):",
    ]
    for key, default, text in key_help():
        shown = "(required)" if default == "???" else repr(default) if isinstance(default, str) else default
        head = f"  {key} [{shown}]"
        lines.append(head)
        lines.extend(textwrap.wrap(text, width=100, initial_indent="      ", subsequent_indent="      "))
    lines += ["", "studies (study=NAME): " + ", ".join(f"{n}" + ("" if w == "shipped" else f" ({w})")
                                                  for n, w in sorted(studies.items()))]
    lines += ["sites (site=NAME, or site=/path/site.yaml):"]
    for name in known_sites():
        site = load_site(name)
        lines.append(f"  {name:12s} {site.provider:7s} {site.mpi_launcher:8s} {site.description}")
    lines += [f"algorithms: {', '.join(ALGORITHMS)}",
              f"models: {', '.join([*MODELS, *registered('model')])}, or model=package.module:factory",
              f"datasets: {', '.join([*DATASETS, *registered('dataset')])}, or dataset=package.module:factory",
              "",
              "examples:",
              "  scalestudy sweep nodes=1,2,4 workers_per_node=1,2 batch_size=32,64",
              "  scalestudy sweep study=eager_sgd site=local_slurm --detach",
              "  scalestudy sweep model=mypkg.nets:make_model +params.hidden=128,256 study_name=mine",
              "  scalestudy sweep --config-dir examples/ddp_gloo/conf study=ddp_gloo nodes=1,2",
              "",
              "Hydra's own help: scalestudy sweep --hydra-help"]
    return "\n".join(lines)


def detach(args: list[str]) -> int:
    """Run the sweep in a background driver that outlives this shell; its state lives in the DB."""
    import subprocess
    import time

    if "--dry-run" in args:
        return fail("--detach and --dry-run together make no sense: a dry run submits nothing")
    # Validate in the foreground first: bad input must fail here, in one line, not in a log.
    check = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--dry-run", *args],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=os.getcwd())
    if check.returncode != 0:
        lines = check.stderr.strip().splitlines()
        print(lines[-1] if lines else f"scalestudy: error: the sweep does not validate (exit {check.returncode})",
              file=sys.stderr)
        return check.returncode
    logs = Path(".scalestudy") / "sweeps"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = (logs / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log").absolute()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "sweep", *args], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=os.getcwd())
    print(f"sweep detached: driver pid {proc.pid}, log {log_path}")
    print("follow it with `scalestudy status`; running the same sweep again resumes what no live sweep drives")
    return 0
