"""``scalestudy`` end to end on the local site: Hydra → Parsl → mpiexec → SQLite."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.ingest.folder import ingest_run
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import RankSummary, Run, Step
from workloads.spec import RunSpec

from conftest import scalestudy

pytestmark = pytest.mark.mpi


def _runs(db_path):
    engine = connect(f"sqlite:///{db_path}")
    with Session(engine) as s:
        return s.scalars(select(Run).order_by(Run.id)).all(), engine


def test_default_smoke_study_end_to_end(tmp_path):
    t0 = time.monotonic()
    proc = scalestudy("sweep", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    # only a hang fails this: the smoke study takes well under a minute on an idle machine, but
    # the suite runs on a busy one (the subprocess's own ceiling is 600 s)
    assert elapsed < 540, f"the smoke study took {elapsed:.0f} s"
    runs, engine = _runs(tmp_path / "scalestudy.db")
    assert len(runs) == 4 and {r.status for r in runs} == {"done"}
    assert {(r.nodes, r.workers_per_node) for r in runs} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    with Session(engine) as s:
        for run in runs:
            # each job got its own allocation: as many ranks reported as the spec asked for
            ranks = s.scalar(select(func.count()).select_from(RankSummary).where(RankSummary.run_id == run.id))
            assert ranks == run.world_size == run.nodes * run.workers_per_node
            steps = s.scalar(select(func.count()).select_from(Step).where(Step.run_id == run.id))
            assert steps == run.steps * run.world_size and run.steps > 0
            assert run.throughput > 0 and 0 <= run.final_top1 <= 1
            # provenance: the project's commit, the orchestrator's environment, the resolved config
            assert run.config["nodes"] == run.nodes and run.config["study_name"] == "smoke"
            assert "db_url" not in run.config and run.environment["parsl"] and run.versions["mpi_library"]
            assert run.git_commit is None or len(run.git_commit) == 40
            command = (tmp_path / "mr" / str(run.id - 1) / "command.txt").read_text()
            assert f"-n {run.world_size} -ppn {run.workers_per_node}" in command
            assert ",".join(["localhost"] * run.nodes) in command
    # on this host one run at a time, whatever its size: their MPI lifetimes never overlap
    spans = []
    for run in runs:
        lines = (tmp_path / "mr" / str(run.id - 1) / "metrics" / "rank-0.jsonl").read_text().splitlines()
        spans.append((json.loads(lines[0])["t"], json.loads(lines[-1])["t"]))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    # the smallest run learns the digits
    assert max(r.final_top1 for r in runs) > 0.9
    # the sweep printed its results table
    assert "this sweep's runs" in proc.stdout and "samples/s" in proc.stdout   # throughput, its short header

    # the same sweep again: every run is skipped, nothing duplicated
    again = scalestudy("sweep", f"hydra.sweep.dir={tmp_path / 'mr2'}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("already done") == 4
    assert len(_runs(tmp_path / "scalestudy.db")[0]) == 4
    assert not (tmp_path / "mr2" / "0").exists()

    status = scalestudy("status", cwd=tmp_path)
    assert status.returncode == 0
    row = next(line for line in status.stdout.splitlines() if "smoke" in line)
    assert [c.strip() for c in row.strip("│ ").split("│")] == ["smoke", "0", "0", "4", "0", "4", "0"]

    query = scalestudy("query", "--study", "smoke", "--where", "nodes>=2", "--format", "csv", cwd=tmp_path)
    assert query.returncode == 0, query.stderr
    rows = list(csv.DictReader(io.StringIO(query.stdout)))
    assert sorted((int(r["nodes"]), int(r["workers_per_node"])) for r in rows) == [(2, 1), (2, 2)]
    assert all(float(r["throughput"]) > 0 for r in rows)

    as_json = json.loads(scalestudy("query", "--format", "json", "--columns", "nodes,status", cwd=tmp_path).stdout)
    assert len(as_json) == 4 and set(as_json[0]) == {"nodes", "status"}

    bad = scalestudy("query", "--where", "nodez>=2", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown column 'nodez'" in bad.stderr


def _seeded_db(tmp_path, finished_run):
    """A database holding one finished run: bad input must leave it untouched."""
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    spec = RunSpec.load(finished_run / "spec.json").to_dict()
    [d] = register_runs(engine, "smoke", [PlannedRun("seeded", spec, str(finished_run))])
    ingest_run(engine, d.run_id, finished_run)
    with Session(engine) as s:
        return s.scalar(select(func.count()).select_from(Step))


@pytest.mark.parametrize("overrides, shown", [
    (["nodes=0"], "nodes=0"),
    (["batch_size=-1"], "batch_size=-1"),
    (["workers_per_node=abc"], "workers_per_node='abc'"),
    (["threads_per_node=3", "workers_per_node=2"], "threads_per_node=3"),
    (["site=nowhere"], "site='nowhere'"),
    (["algorithm=nope"], "algorithm='nope'"),
    (["nodes=1,2,0"], "nodes=0"),  # one bad job in a sweep stops the whole sweep
    (["study=nope"], "study='nope'"),
])
def test_bad_input_is_one_line_and_submits_nothing(tmp_path, finished_run, overrides, shown):
    steps_before = _seeded_db(tmp_path, finished_run)
    sweep_dir = tmp_path / "mr"
    proc = scalestudy("sweep", *overrides, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("scalestudy: error: ") and shown in lines[0]
    # nothing submitted: no job folder, no spec, no Parsl start, no new run rows
    assert not list(sweep_dir.glob("*/spec.json")) and not (sweep_dir / ".parsl").exists()
    runs, engine = _runs(tmp_path / "scalestudy.db")
    assert [r.run_key for r in runs] == ["seeded"] and runs[0].status == "done"
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(Step)) == steps_before


def test_unknown_command_and_help(tmp_path):
    assert scalestudy("frobnicate", cwd=tmp_path).returncode == 2
    out = scalestudy("--help", cwd=tmp_path)
    assert out.returncode == 0 and "sweep" in out.stdout and "status" in out.stdout
    assert "no runs recorded yet" in scalestudy("status", cwd=tmp_path).stdout


@pytest.mark.parametrize("command", [["query"], ["compare", "--baseline", "nodes=1"], ["figures", "--study", "smoke"],
                                     ["report", "--study", "smoke"], ["query", "--db", "sqlite:///typo/results.db"]])
def test_reading_commands_never_create_a_database(tmp_path, command):
    out = scalestudy(*command, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("scalestudy: error: no results database at ")
    assert len(out.stderr.strip().splitlines()) == 1
    assert not any(p.name.startswith("scalestudy.db") for p in tmp_path.iterdir()) and not (tmp_path / "typo").exists()
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("study, runs", [("smoke", 4), ("horovod_scaling", 16), ("eager_sgd", 12), ("eager_sgd_lstm", 3),
                                         # 3 seeds; eager_catch_up=paper,apply_all makes each sync run twice: once
                                         ("eager_sgd_paper_resnet32", 15)])
def test_every_shipped_study_validates(tmp_path, study, runs):
    proc = scalestudy("sweep", f"study={study}", "--dry-run", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("    launch: ") == runs and f"study {study}" in proc.stdout
    if study == "eager_sgd_paper_resnet32":
        assert proc.stdout.count("the same run as #") == 3 and "15 would launch" in proc.stdout


def test_a_dry_run_lists_and_charges_only_the_runs_that_would_launch(tmp_path):
    import sqlite3

    args = ["study_name=dry", "nodes=1", "workers_per_node=1", "workload.kind=command", "workload.command=[echo,hi]"]
    first = scalestudy("sweep", *args, "+params.i=0", f"hydra.sweep.dir={tmp_path / 'mr0'}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    dump = "\n".join(sqlite3.connect(tmp_path / "scalestudy.db").iterdump())
    dry = scalestudy("sweep", *args, "+params.i=0,1,2", "--dry-run", f"hydra.sweep.dir={tmp_path / 'mr1'}",
                     cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "3 runs of study dry" in dry.stdout and "2 would launch" in dry.stdout, dry.stdout
    assert dry.stdout.count("already done (--rerun forces)") == 1 and dry.stdout.count("    launch: ") == 2
    assert "\n".join(sqlite3.connect(tmp_path / "scalestudy.db").iterdump()) == dump   # read, nothing written
    forced = scalestudy("sweep", *args, "+params.i=0,1,2", "--dry-run", "--rerun",
                        f"hydra.sweep.dir={tmp_path / 'mr2'}", cwd=tmp_path)
    assert "3 would launch" in forced.stdout and forced.stdout.count("    launch: ") == 3


def test_a_run_folder_named_through_hydras_resolver(tmp_path):
    """The launcher skips HydraConfig.set_config (a deep copy) for the default subdir only: a
    subdir that reads Hydra's config through its resolver still gets each job's own folder."""
    proc = scalestudy("sweep", "study_name=subdir", "nodes=1", "workers_per_node=1", "workload.kind=command",
                      "workload.command=[echo,hi]", "+params.i=0,1", f"hydra.sweep.dir={tmp_path / 'mr'}",
                      "hydra.sweep.subdir=job_${hydra:job.num}_${hydra:job.override_dirname}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with Session(connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")) as s:
        dirs = sorted(Path(r.run_dir).name for r in s.scalars(select(Run)))
    assert len(dirs) == 2 and dirs[0].startswith("job_0_") and dirs[1].startswith("job_1_"), dirs
    assert "params.i=0" in dirs[0] and "params.i=1" in dirs[1]
    assert all((tmp_path / "mr" / d / "result.json").is_file() for d in dirs)   # spec and results in one folder


def test_a_local_sweep_imports_neither_parsl_nor_pandas(tmp_path):
    """A local sweep's fixed cost (benchmarks/bench_overhead.py): Parsl (~1 s of imports) is for
    sites with a scheduler, pandas for the reading commands. Fails if a new step imports them."""
    import subprocess
    import sys

    from conftest import env_with_bin

    program = ("import sys; from orchestrator.cli import main; "
               "rc = main(['sweep', 'study_name=imports', 'nodes=1', 'workers_per_node=1', 'workload.kind=command', "
               f"'workload.command=[echo,hi]', 'hydra.sweep.dir={tmp_path / 'mr'}']); "
               "print('imported:', sorted(m for m in ('parsl', 'pandas') if m in sys.modules)); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          env=env_with_bin(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "imported: []" in proc.stdout, proc.stdout


@pytest.mark.parametrize("extra, run_jobs", [([], 0), (["+hydra.job.env_set.SCALESTUDY_TEST_VAR=1"], 2)])
def test_local_runs_planned_whole_skip_hydras_run_job(tmp_path, extra, run_jobs):
    """On the local site a planned run executes its spec.json directly (bench_sweep_scale: Hydra's
    run_job copies the config four times a run); a job that asks Hydra for more (here an
    environment variable) still goes through run_job. Counted by wrapping run_job; both sweeps'
    runs must end done with their throughput stored."""
    import subprocess
    import sys

    from conftest import env_with_bin

    db = tmp_path / "r.db"
    args = ["sweep", "study_name=planned", "nodes=1", "workers_per_node=1,2", "workload.kind=command",
            "workload.command=[python,-c,\"print('throughput: 5.0 samples/s')\"]",
            "+workload.metrics.throughput.pattern='throughput: ([0-9.]+)'", f"db_url=sqlite:///{db}",
            f"hydra.sweep.dir={tmp_path / 'mr'}", *extra]
    program = ("import json, sys; import orchestrator.sweep.job_returns as L; calls = []; real = L.run_job\n"
               "def counted(*a, **k):\n    calls.append(1); return real(*a, **k)\n"
               "L.run_job = counted\nfrom orchestrator.cli import main\n"
               "rc = main(json.loads(sys.argv[1])); print('run_job calls:', len(calls)); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", program, json.dumps(args)], cwd=tmp_path, capture_output=True,
                          text=True, env=env_with_bin(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"run_job calls: {run_jobs}" in proc.stdout, proc.stdout[-2000:]
    import sqlite3

    with sqlite3.connect(db) as conn:
        rows = conn.execute("select status, throughput, world_size from runs order by world_size").fetchall()
    assert rows == [("done", 5.0, 1), ("done", 5.0, 2)], rows
