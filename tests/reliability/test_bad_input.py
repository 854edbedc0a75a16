"""Bad input of every kind: one clear line naming what is wrong, exit code 2, nothing
submitted, nothing stored changed, no password in any output.

A seeded SQLite database (one finished run) is dumped before and after each attempt.
"""

from __future__ import annotations

import sqlite3

import pytest

from results_db import connect
from results_db.store.runs import PlannedRun, register_runs
from workloads.spec import RunSpec

from conftest import REPO, scalestudy

SECRET = "hunter2-not-for-logs"
SITE = (REPO / "site_configs" / "local_slurm.yaml").read_text()

CASES = [
    # types
    (["nodes=abc"], "nodes='abc'"),
    (["lr=fast"], "lr='fast'"),
    (["timeline=maybe"], "timeline='maybe'"),
    (["epochs=1.5"], "epochs=1.5"),
    # ranges
    (["nodes=0"], "nodes=0: must be >= 1"),
    (["batch_size=-1"], "batch_size=-1"),
    (["lr=0"], "lr=0: must be > 0"),
    (["sync_every=-1"], "sync_every=-1"),
    (["resync_epochs=-1"], "resync_epochs=-1"),
    (["eager_catch_up=sometimes"], "eager_catch_up='sometimes'"),
    (["timeline=true", "timeline_steps=20-10"], "timeline_steps='20-10'"),
    (["timeline=true", "timeline_steps=last"], "timeline_steps='last'"),
    (["timeline_ranks=4"], "timeline_ranks=4"),
    (["compute=emulated", "compute_profile=no_such_profile"], "compute_profile="),
    (["imbalance.kind=shifted", "imbalance.delay_ms=abc"], "imbalance.delay_ms"),
    (["imbalance.kind=injected", "imbalance.ranks=9"], "imbalance.ranks=9"),
    # unknown keys, values and names
    (["bach_size=64"], "did you mean batch_size?"),
    (["+nodez=2"], "did you mean nodes?"),
    (["algorithm=allreduce"], "algorithm='allreduce'"),
    (["site=nowhere"], "site='nowhere'"),
    (["study=nope"], "study='nope'"),
    (["model=no.such.module:make"], "cannot import 'no.such.module'"),
    # inconsistent
    (["workers_per_node=2", "threads_per_node=3"], "threads_per_node=3: must be a whole multiple"),
    (["model=lstm"], "takes sequence inputs but dataset digits holds images"),
    # site limits
    (["nodes=9"], "site local allows at most 8 nodes"),
    (["site={slurm}", "walltime=02:00:00"], "allows at most 01:00:00"),
    (["site={slurm}", "threads_per_node=4", "workers_per_node=1"], "nodes have 2 hardware threads"),
    # what Hydra would answer with its whole usage, or a hint that does not apply (issue 39)
    (["hydra/launcher=basic"], "hydra/launcher=basic: scalestudy's sweeps run through its own Hydra launcher"),
    (["hydra/sweeper=basic"], "its own Hydra sweeper"),
    (["--bogus-flag"], "unknown flag '--bogus-flag'; sweep's flags: --rerun"),
    (["foo"], "'foo': an override is KEY=VALUE"),
    # malformed files
    (["site={bad_yaml}"], "not valid YAML"),
    (["--config-dir", "{conf}", "study=broken"], "{conf}/study/broken.yaml, line 3: not valid YAML"),
    # shell metacharacters in everything that reaches a batch script
    (["site={slurm}", "account=proj;touch /tmp/x"], "invalid override 'account=proj;touch /tmp/x'"),
    (["site={slurm}", "account='proj;touch /tmp/x'"], "account='proj;touch /tmp/x'"),
    (["site={slurm}", "queue='debug$(id)'"], "queue='debug$(id)'"),
    (["site={slurm}", "walltime=00:10:00`id`"], "walltime="),
    (["study_name='a b;c'"], "study_name='a b;c'"),
    (["site={evil_init}"], "site.worker_init"),
    (["site={evil_env}"], "site.env"),
    # a database that cannot be reached: one line, password masked
    ([f"db_url=postgresql+psycopg://scalestudy:{SECRET}@127.0.0.1:1/nowhere"], "database postgresql+psycopg://scalestudy:***@127.0.0.1:1/nowhere"),
]


@pytest.fixture
def seeded(tmp_path, finished_run):
    db = tmp_path / "scalestudy.db"
    engine = connect(f"sqlite:///{db}")
    spec = RunSpec.load(finished_run / "spec.json").to_dict()
    [d] = register_runs(engine, "smoke", [PlannedRun("seeded", spec, str(finished_run))])
    from results_db.ingest.folder import ingest_run

    ingest_run(engine, d.run_id, finished_run)
    engine.dispose()
    return db


def _files(tmp_path):
    (tmp_path / "bad.yaml").write_text("provider: slurm\nmpi_launcher: [srun\n")
    (tmp_path / "slurm.yaml").write_text(SITE)
    (tmp_path / "evil_init.yaml").write_text(SITE + "worker_init:\n  - 'echo $(id)'\n")
    (tmp_path / "evil_env.yaml").write_text(SITE + "env:\n  'X;id': 1\n")
    (tmp_path / "conf" / "study").mkdir(parents=True)
    (tmp_path / "conf" / "study" / "broken.yaml").write_text("# @package _global_\nstudy_name: [unclosed\n")
    return {"bad_yaml": tmp_path / "bad.yaml", "slurm": tmp_path / "slurm.yaml", "evil_init": tmp_path / "evil_init.yaml",
            "evil_env": tmp_path / "evil_env.yaml", "conf": tmp_path / "conf"}


def test_there_are_at_least_25_distinct_cases():
    assert len({tuple(args) for args, _ in CASES}) >= 25


@pytest.mark.parametrize("args, shown", CASES, ids=[" ".join(a)[:40] for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(tmp_path, seeded, args, shown):
    paths = _files(tmp_path)
    args = [a.format(**paths) for a in args]
    dump = lambda: "\n".join(sqlite3.connect(seeded).iterdump())  # noqa: E731
    before = dump()
    proc = scalestudy("sweep", *args, f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("scalestudy: error: "), proc.stderr
    assert shown.format(**paths) in lines[0], lines[0]
    assert SECRET not in proc.stdout + proc.stderr
    assert not (tmp_path / "mr").exists() and not (tmp_path / "x").exists()
    assert dump() == before
    logs = [p for p in tmp_path.rglob("*.log")]
    assert all(SECRET not in p.read_text(errors="replace") for p in logs)
