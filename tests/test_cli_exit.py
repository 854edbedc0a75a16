"""How the ``scalestudy`` command ends (``orchestrator.cli.run``) and what a sweep skips of
Hydra's start: the interpreter's teardown is skipped, nothing a normal exit gives is lost,
and Hydra does not compose the config an extra time only to read its mode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import env_with_bin

REPO = Path(__file__).resolve().parent.parent


def _run(program: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(program)], cwd=cwd, capture_output=True, text=True,
                          env=env_with_bin({"PYTHONPATH": str(REPO)}), timeout=timeout)


def test_run_keeps_the_exit_status_the_exit_handlers_and_the_buffered_output(tmp_path):
    """Under a pipe stdout is block-buffered: output without a newline, a logging file
    handler's last record and an exit handler's file must all be there, with main's status."""
    proc = _run(f"""
        import atexit, logging
        import orchestrator.cli as cli
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


def test_run_waits_for_a_thread_still_working(tmp_path):
    """A thread alive when main returns: the normal exit, which waits for it (os._exit would
    kill it before its file is written)."""
    proc = _run(f"""
        import threading, time
        import orchestrator.cli as cli

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


def test_a_sweep_does_not_ask_hydra_for_its_mode(tmp_path):
    """``Hydra.get_mode`` composes the whole config once more only to read ``hydra.mode``;
    ``scalestudy sweep`` always runs a multirun. A spy in its place is never called during a
    sweep (a dry run) and is back in place after it; the sweep still runs as a multirun."""
    proc = _run(f"""
        import json
        from hydra._internal.hydra import Hydra
        calls = []
        original = Hydra.get_mode

        def spy(self, *args, **kwargs):
            calls.append(1)
            return original(self, *args, **kwargs)

        Hydra.get_mode = spy
        from orchestrator.cli import main
        rc = main(["sweep", "--dry-run", "study_name=mode", "nodes=1", "workers_per_node=1", "workload.kind=command",
                   "workload.command=[echo,hi]", "+params.i=0,1", "hydra.sweep.dir={tmp_path / 'mr'}"])
        print(json.dumps({{"rc": rc, "calls": len(calls), "restored": Hydra.get_mode is spy}}))
    """, tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last == '{"rc": 0, "calls": 0, "restored": true}', proc.stdout[-2000:]
    assert "2 runs of study mode" in proc.stdout, proc.stdout[-2000:]   # both jobs of the multirun
