"""A user's own workloads, end to end through real sweeps: their model and data set by
import path (every algorithm), their unmodified torch.distributed script, the same script
with the reporting module, a program that is not Python, and a Horovod script; on the
local site and on the local Slurm cluster. Bad input fails before anything is submitted.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Eval, RankSummary, Run, Step

from conftest import REPO, scalestudy

pytestmark = pytest.mark.mpi
EXAMPLES = REPO / "examples"
HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None


SITES = ["local", pytest.param("local_slurm", marks=pytest.mark.slurm)]


def _sweep(tmp_path: Path, example: str, *overrides: str, env: dict | None = None, timeout: float = 600):
    """``scalestudy sweep --config-dir examples/<x>/conf study=<x>`` from the repository root, as the README says."""
    db = tmp_path / "results.db"
    return scalestudy("sweep", "--config-dir", str(EXAMPLES / example / "conf"), f"study={example}", *overrides,
                      f"hydra.sweep.dir={tmp_path / 'mr'}", f"db_url=sqlite:///{db}", cwd=REPO, timeout=timeout,
                      env=env), db


def _runs(db: Path) -> list[Run]:
    with Session(connect(f"sqlite:///{db}")) as s:
        return s.scalars(select(Run).order_by(Run.id)).all()


def test_user_model_and_dataset_train_under_every_algorithm(tmp_path):
    algorithms = "sync,ddp,eager_solo,eager_majority,async_ps" + (",horovod" if HAVE_HOROVOD else "")
    proc, db = _sweep(tmp_path, "tiny_transformer", f"algorithm={algorithms}",
                      env={"PYTHONPATH": str(EXAMPLES / "tiny_transformer")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(db)
    assert sorted(r.algorithm for r in runs) == sorted(algorithms.split(","))
    for run in runs:
        assert run.status == "done", (run.algorithm, run.error)
        assert run.model == "tinytf.nets:make_model" and run.params == {"d_model": 32, "layers": 2}
        assert run.throughput > 0 and run.world_size == 2
    # next-token accuracy on the Markov corpus: chance is 1/16; synchronous SGD learns it
    sync = next(r for r in runs if r.algorithm == "sync")
    assert sync.final_top1 > 2 / 16, sync.final_top1


def test_params_reach_the_factory_and_the_run_identity(tmp_path):
    """The factory receives the run's params (it records what it got), and params are identity."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "recording.py").write_text(
        "import json, os, pathlib\n"
        "from tinytf.nets import make_model as real\n"
        "def make_model(input_shape, num_classes, params):\n"
        "    out = pathlib.Path(params['record']) / f'{os.getpid()}.json'\n"
        "    out.write_text(json.dumps(params))\n"
        "    return real(input_shape, num_classes, params)\n")
    record = tmp_path / "seen"
    record.mkdir()
    proc, db = _sweep(tmp_path, "tiny_transformer", "algorithm=sync", "model=recording:make_model",
                      "+params.heads=1,4", f"+params.record={record}", "epochs=1", "steps_per_epoch=3",
                      env={"PYTHONPATH": f"{EXAMPLES / 'tiny_transformer'}{os.pathsep}{pkg}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = [json.loads(p.read_text()) for p in record.iterdir()]
    assert len(seen) == 4  # 2 runs x 2 ranks
    assert sorted(s["heads"] for s in seen) == [1, 1, 4, 4] and all(s["d_model"] == 32 for s in seen)
    runs = _runs(db)
    assert sorted(r.params["heads"] for r in runs) == [1, 4] and len({r.run_key for r in runs}) == 2
    query = scalestudy("query", "--db", f"sqlite:///{db}", "--where", "params.heads=4", "--format", "json",
                       cwd=tmp_path)
    rows = json.loads(query.stdout)
    assert query.returncode == 0 and len(rows) == 1 and rows[0]["params.heads"] == 4


def _assert_distributed_env(run_dir: Path, world: int, per_node: int) -> None:
    """Each rank saw its own RANK and LOCAL_RANK, and all saw one MASTER_ADDR:PORT."""
    masters = set()
    for rank in range(world):
        env = json.loads((run_dir / "output" / f"rank-{rank}.log").read_text().splitlines()[-1])
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (str(rank), str(world), str(per_node))
        assert env["LOCAL_RANK"] == str(rank % per_node)
        masters.add((env["MASTER_ADDR"], env["MASTER_PORT"]))
    assert len(masters) == 1


@pytest.mark.parametrize("site", SITES)
def test_ranks_get_what_torch_distributed_expects(tmp_path, site):
    show = ("import json, os; print(json.dumps({k: os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', "
            "'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}))")
    proc = scalestudy("sweep", f"site={site}", "study_name=envcheck", "nodes=2", "workers_per_node=2",
                      "workload.kind=command", f"workload.command=[python,-c,{json.dumps(show)}]",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = _runs(tmp_path / "scalestudy.db")
    assert run.status == "done" and run.exit_code == 0, run.error
    _assert_distributed_env(tmp_path / "mr" / "0", world=4, per_node=2)


@pytest.mark.parametrize("site", SITES)
def test_unmodified_torch_distributed_script(tmp_path, site):
    proc, db = _sweep(tmp_path, "ddp_gloo", f"site={site}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(db)
    assert [(r.nodes, r.status) for r in runs] == [(1, "done"), (2, "done")], [r.error for r in runs]
    for run, job in zip(runs, ("0", "1")):
        out = (tmp_path / "mr" / job / "output" / "rank-0.log").read_text()
        printed = float(re.search(r"throughput: ([0-9.]+) samples/s", out).group(1))
        assert run.throughput == pytest.approx(printed) and run.exit_code == 0 and run.wall_seconds > 0
        assert run.metrics["final_loss_printed"] == pytest.approx(float(re.search(r"final loss: ([0-9.]+)", out).group(1)))
        world = run.nodes * 2
        for rank in range(world):
            assert f"rank {rank} of {world}" in (tmp_path / "mr" / job / "output" / f"rank-{rank}.log").read_text()
        assert "throughput" in run.output_tail
        with Session(connect(f"sqlite:///{db}")) as s:
            nodes = {h for (h,) in s.execute(select(RankSummary.host).where(RankSummary.run_id == run.id))}
        assert len(nodes) == (run.nodes if site == "local_slurm" else 1)


@pytest.mark.parametrize("site", SITES)
def test_script_with_the_reporting_module(tmp_path, site):
    proc, db = _sweep(tmp_path, "ddp_report", f"site={site}", "nodes=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = _runs(db)
    assert run.status == "done" and run.throughput > 0 and "final_train_loss" in run.metrics, run.error
    with Session(connect(f"sqlite:///{db}")) as s:
        steps = s.scalar(select(func.count()).select_from(Step).where(Step.run_id == run.id))
        evals = s.scalars(select(Eval).where(Eval.run_id == run.id)).all()
    assert steps == 2 * 30 * run.world_size and run.steps == 60
    assert len(evals) == 2 and 0 <= evals[-1].top1 <= 1 and run.final_top1 == evals[-1].top1
    figures = scalestudy("figures", "--study", "ddp_report", "--db", f"sqlite:///{db}", "--out",
                         str(tmp_path / "figs"), cwd=tmp_path)
    assert figures.returncode == 0 and "drew    step_time_breakdown" in figures.stdout, figures.stdout
    # the run trained with the user's program: no table may say our loop's algorithm=sync trained it
    assert run.algorithm == "sync" and run.workload_kind == "command"   # stored: the spec's defaults
    query = scalestudy("query", "--study", "ddp_report", "--db", f"sqlite:///{db}", "--format", "csv", cwd=tmp_path)
    [row] = list(csv.DictReader(io.StringIO(query.stdout)))
    assert (row["algorithm"], row["model"], row["nodes"]) == ("", "", "2"), row
    status = scalestudy("status", "--study", "ddp_report", "--db", f"sqlite:///{db}", cwd=tmp_path)
    assert status.returncode == 0 and "sync" not in status.stdout and "small_cnn" not in status.stdout, status.stdout
    report = scalestudy("report", "--study", "ddp_report", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "rep"),
                        cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "your program" in page and "examples/ddp_report/train.py" in page and "fusion threshold" not in page


@pytest.mark.parametrize("site", SITES)
def test_a_program_that_is_not_python(tmp_path, site):
    proc, db = _sweep(tmp_path, "shell_program", f"site={site}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for run, job in zip(_runs(db), ("0", "1")):
        rates = [float(re.search(r"at ([0-9.]+) MB/s", (tmp_path / "mr" / job / "output" / f"rank-{r}.log")
                                 .read_text()).group(1)) for r in range(run.world_size)]
        assert run.status == "done" and run.throughput == pytest.approx(sum(rates))
        assert run.metrics["slowest_rank_rate"] == pytest.approx(min(rates))


@pytest.mark.skipif(not HAVE_HOROVOD, reason="Horovod is not installed here (bash scripts/install-horovod.sh builds it)")
@pytest.mark.parametrize("site", SITES)
def test_a_horovod_script(tmp_path, site):
    proc, db = _sweep(tmp_path, "horovod_script", f"site={site}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r.status for r in _runs(db)] == ["done", "done"]


def test_a_command_records_its_threads_and_the_binding_audit_applies(tmp_path):
    """A command workload's ranks record the threads their program is told to run (OMP_NUM_THREADS)
    and their CPUs, as the train loop's do: 2 ranks told to run as many threads each as this
    machine gives them CPUs oversubscribe it and are flagged; the control, one thread each, is not."""
    usable = len(os.sched_getaffinity(0))
    if usable < 2:
        pytest.skip("needs 2 CPUs")
    show = "import os; print('threads', os.environ['OMP_NUM_THREADS'])"
    proc = scalestudy("sweep", "study_name=cmdthreads", "nodes=1", "workers_per_node=2",
                      f"threads_per_node=2,{2 * usable}", "workload.kind=command",
                      f"workload.command=[python,-c,{json.dumps(show)}]", f"hydra.sweep.dir={tmp_path / 'mr'}",
                      cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {r.threads_per_node: r for r in _runs(tmp_path / "scalestudy.db")}
    for threads, job in ((2, "0"), (2 * usable, "1")):
        for rank in range(2):
            [start] = [json.loads(line) for line in (tmp_path / "mr" / job / "metrics" / f"rank-{rank}.jsonl")
                       .read_text().splitlines() if '"run_start"' in line]
            assert start["threads"] == threads // 2 and start["cpus"] and "cpu_quota" in start, start
            assert f"threads {threads // 2}" in (tmp_path / "mr" / job / "output" / f"rank-{rank}.log").read_text()
    assert runs[2].status == "done" and runs[2].binding == []
    crowded = runs[2 * usable]
    assert crowded.status == "done" and len(crowded.binding) == 1, crowded.binding
    assert f"run {2 * usable} threads on the {usable} CPU(s) they may use" in crowded.binding[0]
    assert crowded.binding[0].endswith("unbound: oversubscribed")
    assert crowded.host_load == pytest.approx(2.0)


def test_failures_are_stored_with_their_reason(tmp_path):
    proc = scalestudy("sweep", "study_name=fails", "nodes=1", "workers_per_node=2", "workload.kind=command",
                      "workload.command=[python,-c,'import os,sys; print(\"boom on\", os.environ[\"RANK\"]); "
                      "sys.exit(3 if os.environ[\"RANK\"] == \"1\" else 0)']", f"hydra.sweep.dir={tmp_path / 'a'}",
                      cwd=tmp_path, timeout=300)
    assert proc.returncode == 1 and "1 of 1 run failed" in proc.stderr.splitlines()[-1], proc.stderr[-3000:]
    never = scalestudy("sweep", "study_name=fails", "nodes=1", "workers_per_node=1", "workload.kind=command",
                       "workload.command=[echo,hello]",
                       "+workload.metrics.throughput.pattern='rate=([0-9]+)'", f"hydra.sweep.dir={tmp_path / 'b'}",
                       cwd=tmp_path, timeout=300)
    assert never.returncode == 1, never.stderr[-3000:]
    failed, unmatched = _runs(tmp_path / "scalestudy.db")
    assert failed.status == "failed" and failed.exit_code == 3 and "exited with 3 (rank 1): boom on 1" in failed.error
    assert "\n" not in failed.error and "boom on 1" in failed.output_tail
    assert unmatched.status == "failed" and unmatched.exit_code == 0 and "\n" not in unmatched.error
    assert "metric 'throughput': pattern 'rate=([0-9]+)' never matched in rank 0's output" in unmatched.error
    status = scalestudy("status", "--study", "fails", "--failed", cwd=tmp_path)
    assert status.returncode == 0 and "boom on 1" in status.stdout and "never matched" in status.stdout
    assert f"log: {tmp_path / 'a' / '0' / 'workload.log'}" in status.stdout


def test_a_factory_that_raises_fails_the_run_with_its_message(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "brokenmodels.py").write_text("def make(**kw):\n    raise ValueError('hidden must be even, got 3')\n")
    proc = scalestudy("sweep", "study_name=broken", "nodes=1", "workers_per_node=1", "model=brokenmodels:make",
                      "epochs=1", "steps_per_epoch=1",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, env={"PYTHONPATH": str(pkg)}, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Error executing job" not in proc.stderr, \
        proc.stderr[-3000:]
    [run] = _runs(tmp_path / "scalestudy.db")
    assert run.status == "failed" and "ValueError: hidden must be even, got 3" in run.error


def test_installed_packages_register_short_names(tmp_path):
    """The entry-point groups scalestudy.models / scalestudy.datasets, as `pip install` of the example writes them."""
    site = tmp_path / "site"
    dist = site / "tinytf-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinytf\nVersion: 0.1.0\n")
    import tomllib

    groups = tomllib.loads((EXAMPLES / "tiny_transformer" / "pyproject.toml").read_text())["project"]["entry-points"]
    (dist / "entry_points.txt").write_text("".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
                                                   for group, eps in groups.items()))
    env = {"PYTHONPATH": f"{site}{os.pathsep}{EXAMPLES / 'tiny_transformer'}"}
    proc = scalestudy("sweep", "--dry-run", "study_name=short", "model=tiny_transformer", "dataset=markov_tokens",
                      "workers_per_node=2", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    helped = scalestudy("sweep", "--help", cwd=tmp_path, env=env)
    assert "tiny_transformer" in helped.stdout and "markov_tokens" in helped.stdout


BAD = [
    (["model=nosuchpkg.nets:make"], "model='nosuchpkg.nets:make': cannot import 'nosuchpkg.nets'"),
    (["model=os.path:nope"], "module 'os.path' has no attribute 'nope'"),
    (["model=os:sep"], "is a str, not a callable"),
    (["dataset=nothing_like_this"], "dataset='nothing_like_this': unknown dataset"),
    (["workload.kind=command", "workload.command=[./no/such/prog]"], "no such program"),
    (["workload.kind=command", "workload.command=[no-such-program-anywhere]"], "not found on this host's PATH"),
    (["workload.kind=command", "workload.command=[{notexec}]"], "is not executable"),
    (["workload.kind=command", "workload.command=[echo]", "+workload.metrics.throughput.pattern='(['"],
     "is not a valid regular expression"),
    (["workload.kind=command", "workload.command=[echo]", "+workload.metrics.throughput.pattern='rate [0-9]+'"],
     "has 0 groups; it needs exactly one"),
    (["workload.kind=command", "workload.command=[echo]", "+workload.metrics.nodes.pattern='n=([0-9]+)'"],
     "'nodes' is a built-in run column"),
    (["workload.kind=command", "workload.command=[echo]", "+workload.metrics.x.reduce=median",
      "+workload.metrics.x.pattern='([0-9]+)'"], "reduce='median'"),
    (["workload.kind=command"], "workload.command=None"),
    (["workload.kind=script"], "workload.kind='script': unknown workload.kind"),
    (["workload.command=[echo]"], "need workload.kind=command"),
    (["bach_size=64"], "bach_size: unknown key; did you mean batch_size?"),
    (["+bach_size=64"], "bach_size=64: unknown key; did you mean batch_size?"),
    (["+node=2"], "node=2: unknown key; did you mean nodes?"),
    (["params.hidden=4"], "+params.hidden=VALUE"),
]


@pytest.mark.parametrize("overrides, shown", BAD)
def test_bad_user_input_is_one_line_and_submits_nothing(tmp_path, overrides, shown):
    notexec = tmp_path / "notexec.sh"
    notexec.write_text("echo hi\n")
    overrides = [o.replace("{notexec}", str(notexec)) for o in overrides]
    proc = scalestudy("sweep", "study_name=bad", *overrides, f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and shown in lines[0], proc.stderr
    assert not (tmp_path / "mr").exists() and not (tmp_path / "scalestudy.db").exists()


def test_a_misspelt_study_file_is_refused_naming_the_key(tmp_path):
    conf = tmp_path / "conf" / "study"
    conf.mkdir(parents=True)
    (conf / "typo.yaml").write_text("# @package _global_\nstudy_name: typo\nbach_size: 64\nmodle: resnet20\n")
    proc = scalestudy("sweep", "--config-dir", str(tmp_path / "conf"), "study=typo", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "bach_size: unknown key in study/typo; did you mean batch_size?" in proc.stderr


def test_reporting_module_needs_neither_torch_nor_mpi_and_is_silent_outside_a_run(tmp_path):
    code = ("import sys; from workloads import report; report.step(step=0, samples=4, seconds=0.1); "
            "report.eval(epoch=0, top1=0.5); report.result(throughput=1.0); "
            "assert not report.enabled(); assert 'torch' not in sys.modules and 'mpi4py' not in sys.modules; "
            "import workloads.command, workloads.output_metrics; assert 'torch' not in sys.modules")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALESTUDY_")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_run_past_its_time_limit_is_stopped_whole(tmp_path):
    """run_timeout stops the launcher's whole process group: no rank outlives its run."""
    import time

    marker = f"sleep {int(time.time()) % 1000 + 7000}"   # a command line no other process has
    t0 = time.monotonic()
    proc = scalestudy("sweep", "study_name=slow", "nodes=1", "workers_per_node=2", "workload.kind=command",
                      f"workload.command=[{marker.replace(' ', ',')}]", "run_timeout=3",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=300)
    # only a run never stopped fails this (its command sleeps two hours): a busy machine may take
    # minutes over the sweep's start-up, and its 3 s run
    assert proc.returncode == 1 and time.monotonic() - t0 < 240, proc.stderr[-2000:]
    [run] = _runs(tmp_path / "scalestudy.db")
    assert run.status == "timeout" and "passed its time limit of 3 s" in run.error
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes outlived the run: {left}"


def test_ctrl_c_stops_the_sweep_and_its_runs_in_seconds(tmp_path):
    """One SIGINT to the driver's process group (what a terminal's Ctrl-C does): one line,
    the running MPI job stopped, a non-zero exit within seconds; the same command resumes."""
    import signal
    import time

    from conftest import env_with_bin, sigint_default

    marker = f"sleep {int(time.time()) % 1000 + 8000}"
    args = [sys.executable, "-m", "orchestrator.cli", "sweep", "study_name=ctrlc", "nodes=1", "workers_per_node=1",
            "workload.kind=command", f"workload.command=[{marker.replace(' ', ',')}]", "+params.i=0,1",
            f"hydra.sweep.dir={tmp_path / 'mr'}"]
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=tmp_path, env=env_with_bin(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=sigint_default)
    # the run is running: waited for (a generous ceiling, only a run that never starts reaches it)
    deadline = time.monotonic() + 300
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0  # the run is running
    started_in = time.monotonic() - t0
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    # in seconds: stopping takes no longer than starting took, measured here (a busy machine
    # stretches both alike), nor than 20 s on an idle machine
    elapsed = time.monotonic() - t0
    assert proc.returncode == 130 and elapsed < max(20.0, started_in), (elapsed, started_in, err)
    assert err.strip().splitlines()[-1] == "interrupted: 0 runs done, 2 stopped; rerun the same command to resume"
    assert "Traceback" not in err and "this sweep's runs" not in out
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout.split() == []
    assert {r.status for r in _runs(tmp_path / "scalestudy.db")} == {"interrupted"}   # not "failed" (issue 39)
    assert all("interrupted" in r.error for r in _runs(tmp_path / "scalestudy.db"))


def test_a_relative_pythonpath_means_where_the_sweep_started():
    """Runs execute in folders of their own: ``PYTHONPATH=examples/x scalestudy sweep ...`` (the
    tutorial's form) must reach the ranks as an absolute path (tests/project/test_docs.py runs it for real)."""
    from orchestrator.cli.sweep_cmd import absolute_pythonpath

    sep = os.pathsep
    assert absolute_pythonpath(f"examples/x{sep}/opt/lib{sep}{sep}../y", "/home/me/clone") == \
        f"/home/me/clone/examples/x{sep}/opt/lib{sep}{sep}/home/me/y"
