"""How the ``scalestudy`` command ends (``orchestrator.cli.run``) and what a sweep skips of
Hydra's start: the interpreter's teardown is skipped, nothing a normal exit gives is lost,
and Hydra does not compose the config an extra time only to read its mode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import env_with_bin

REPO = Path(__file__).resolve().parents[2]


# a generous ceiling: it only matters for a hang, and the machine may be busy
def _run(program: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(program)], cwd=cwd, capture_output=True, text=True,
                          env=env_with_bin({"PYTHONPATH": str(REPO)}), timeout=timeout)


def test_run_keeps_the_exit_status_the_exit_handlers_and_the_buffered_output(tmp_path):
    """Under a pipe stdout is block-buffered: output without a newline, a logging file
    handler's last record and an exit handler's file must all be there, with main's status;
    and the teardown was skipped (a module global's finaliser, which a normal exit runs, did
    not run: the control is the next test)."""
    proc = _run(f"""
        import atexit, logging
        import orchestrator.cli as cli

        class Finalised:
            def __del__(self, _open=open):   # builtins are gone by then
                _open({str(tmp_path / "teardown.txt")!r}, "w").write("ran")

        keep = Finalised()
        log = logging.getLogger("t")
        log.addHandler(logging.FileHandler({str(tmp_path / 'log.txt')!r}))
        log.setLevel(logging.INFO)
        atexit.register(lambda: open({str(tmp_path / 'atexit.txt')!r}, "w").write("ran"))

        def main():
            print("x" * 5000, end="")      # stays in the buffer until the exit flushes it
            log.info("last record")
            return 3

        cli.main = main
        cli.run()
        raise SystemExit("run() returned")
    """, tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "x" * 5000
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert "last record" in (tmp_path / "log.txt").read_text()
    assert not (tmp_path / "teardown.txt").exists()     # os._exit: no teardown


def test_run_waits_for_a_thread_still_working(tmp_path):
    """A thread alive when main returns: the normal exit, which waits for it (os._exit would
    kill it before its file is written), with the teardown (the finaliser runs)."""
    proc = _run(f"""
        import threading, time
        import orchestrator.cli as cli

        class Finalised:
            def __del__(self, _open=open):   # builtins are gone by then
                _open({str(tmp_path / "teardown.txt")!r}, "w").write("ran")

        keep = Finalised()

        def late():
            time.sleep(0.5)
            open({str(tmp_path / 'late.txt')!r}, "w").write("written")

        def main():
            threading.Thread(target=late).start()
            return 0

        cli.main = main
        cli.run()
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "late.txt").read_text() == "written"
    assert (tmp_path / "teardown.txt").read_text() == "ran"


@pytest.mark.parametrize("returned, status, stderr", [(None, 0, ""), ("stopped: a message", 1, "stopped: a message\n"),
                                                      (7, 7, "")])
def test_run_exits_with_the_status_sys_exit_would_give(tmp_path, returned, status, stderr):
    proc = _run(f"""
        import orchestrator.cli as cli
        cli.main = lambda: {returned!r}
        cli.run()
    """, tmp_path)
    assert (proc.returncode, proc.stderr) == (status, stderr)


def test_the_command_and_python_m_both_end_through_run():
    """The console script (pyproject) and ``python -m orchestrator.cli`` call ``run``, not ``main``."""
    assert 'scalestudy = "orchestrator.cli:run"' in (REPO / "pyproject.toml").read_text()
    assert "run()" in (REPO / "orchestrator" / "cli" / "__main__.py").read_text()


def test_a_database_written_before_the_exit_is_closed_without_wal_files(tmp_path):
    """The engines ``connect`` made are disposed by an exit handler: SQLite checkpoints its
    write-ahead log and removes it, as after a normal exit (os._exit alone left db-wal, db-shm)."""
    proc = _run(f"""
        import orchestrator.cli as cli
        from sqlalchemy import text

        def main():
            from results_db.store.connect import connect
            engine = connect("sqlite:///{tmp_path / 'db.sqlite'}", upgrade=False)
            with engine.begin() as c:
                c.execute(text("create table t (x int)"))
                c.execute(text("insert into t values (1)"))
            return 0

        cli.main = main
        cli.run()
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.sqlite"]
    import sqlite3

    assert sqlite3.connect(tmp_path / "db.sqlite").execute("select x from t").fetchall() == [(1,)]


def test_version_names_this_release_and_what_it_drives(tmp_path):
    from importlib import metadata

    from conftest import scalestudy

    proc = scalestudy("--version", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    for name in ("scalestudy", "parsl", "hydra-core", "torch"):
        assert f"{name} {metadata.version(name)}" in proc.stdout
    assert "--version" in scalestudy("--help", cwd=tmp_path).stdout


def test_reruns_help_says_earlier_results_are_kept(tmp_path):
    """--rerun records a new attempt and keeps the earlier ones (tests/reliability: attempts);
    its help said they were replaced."""
    from conftest import scalestudy

    text = " ".join(scalestudy("sweep", "--help", cwd=tmp_path).stdout.split())
    assert "the earlier results are kept" in text and "replaced" not in text


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`scalestudy query ... | head`: no traceback, no "Exception ignored"; 141 as a Unix tool
    that SIGPIPE ended (or 0 where everything was written before the reader left)."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "query", "--list-columns"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env_with_bin({"PYTHONPATH": str(REPO)}))
    proc.stdout.close()          # gone before a line is read
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=180) == 141 and err == "", err


def test_a_bad_option_or_study_is_one_line_and_exit_2(tmp_path):
    """Issue 62: argparse answered a misspelt option with 5-6 lines of usage, and ``status --study
    nosuch`` said "no runs recorded yet", exit 0, where query and report say "no such study"."""
    from results_db import connect

    from conftest import scalestudy

    db = f"sqlite:///{tmp_path / 'x.db'}"
    connect(db).dispose()
    for args, said in ((("query", "--studdy", "x"), "unrecognized arguments: --studdy"),
                       (("query", "--format", "xlsx"), "invalid choice: 'xlsx'"),
                       (("model", "fit", "--bogus"), "required: --study"),
                       (("status", "--study", "nosuch", "--db", db), "no such study")):
        proc = scalestudy(*args, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and said in proc.stderr, \
            (args, proc.stderr)
    assert scalestudy("query", "--help", cwd=tmp_path).stdout.count("--format") >= 1   # --help still whole


def test_a_misspelt_value_command_or_metric_gets_did_you_mean(tmp_path):
    """Issue 62: "did you mean" was given for keys, columns and metrics, not for values
    (``algorithm=eagr_solo``, ``study=smok``, ``model=resnet5O``, ``site=polaras``), commands
    (``statsu``) or a metric's short name (``top1`` for ``final_top1``). Each refusal is still one
    line, exit 2; a word near nothing gets no guess (the control)."""
    from workloads.did_you_mean import nearest

    from conftest import scalestudy

    for args, said in ((("statsu",), "did you mean 'status'?"),
                       (("sweep", "algorithm=eagr_solo", "--dry-run"), "did you mean 'eager_solo'?"),
                       (("sweep", "study=smok", "--dry-run"), "did you mean 'smoke'?"),
                       (("sweep", "model=resnet5O", "--dry-run"), "did you mean 'resnet50'?"),
                       (("sweep", "site=polaras", "--dry-run"), "did you mean 'polaris'?")):
        proc = scalestudy(*args, cwd=tmp_path)
        assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
            (args, proc.stderr)
    no_guess = scalestudy("sweep", "algorithm=zzz", "--dry-run", cwd=tmp_path)
    assert no_guess.returncode == 2 and "did you mean" not in no_guess.stderr
    assert nearest("top1", ["final_top1", "final_loss", "throughput"]) == "final_top1"
    assert nearest("loss", ["final_top1", "final_loss"]) == "final_loss"
    assert nearest("zzz", ["final_top1"]) is None


def test_each_model_action_has_its_own_help(tmp_path):
    """Issue 62: ``model fit --help`` printed the options of predict and export too; an option of
    another action is now refused in one line."""
    from conftest import scalestudy

    fit = scalestudy("model", "fit", "--help", cwd=tmp_path).stdout
    predict = scalestudy("model", "predict", "--help", cwd=tmp_path).stdout
    assert "--replicates" in fit and "--nodes" not in fit and "--format" not in fit
    assert "--nodes" in predict and "--replicates" not in predict
    wrong = scalestudy("model", "fit", "--study", "s", "--nodes", "3", cwd=tmp_path)
    assert wrong.returncode == 2 and "unrecognized arguments: --nodes 3" in wrong.stderr
