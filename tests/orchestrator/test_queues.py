"""Queue limits as data: routing, refusal and charge, on the real site files' queue tables
(Theta's and Polaris's from ALCF's pages, cited in the site files) and through the CLI."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.errors import ConfigError
from orchestrator.site.queues import charged_node_hours, choose_queue, plan_batch_jobs
from orchestrator.site.config import load_site, with_overrides

from conftest import scalestudy


def test_small_theta_runs_leave_the_128_node_default_queue():
    theta = load_site("theta")
    assert choose_queue(theta, 128) == ("default", "")
    name, note = choose_queue(theta, 2)
    assert name == "debug-cache-quad" and "default takes at least 128" in note
    # 9-127 nodes: too big for debug (8), too small for default (128): refused, naming both
    with pytest.raises(ConfigError) as err:
        choose_queue(theta, 9)
    assert "debug-cache-quad (1-8 nodes" in str(err.value) and "default (128-4100" in str(err.value)


def test_theta_walltime_grows_with_node_count():
    theta = with_overrides(load_site("theta"), walltime="05:00:00")
    with pytest.raises(ConfigError, match="at most 03:00:00 for 128"):
        choose_queue(with_overrides(theta, queue="default"), 128)
    assert choose_queue(theta, 256)[0] == "default"     # 256 nodes: up to 6 h


def test_polaris_routes_by_size_and_never_to_preemptable():
    polaris = load_site("polaris")
    assert [choose_queue(polaris, n)[0] for n in (1, 2, 3, 10, 496)] == ["debug", "debug", "debug-scaling", "prod", "prod"]
    long = with_overrides(polaris, walltime="04:00:00")
    assert choose_queue(long, 25)[0] == "prod"            # medium: 6 h
    with pytest.raises(ConfigError, match="no queue of site polaris"):
        choose_queue(long, 5)                              # only preemptable (not routed) takes 5 nodes for 4 h


def test_a_queue_given_on_the_command_line_is_kept_or_refused():
    pinned = with_overrides(load_site("polaris"), queue="debug")
    assert [job.queue for job in plan_batch_jobs(pinned, [2])] == ["debug"]
    with pytest.raises(ConfigError) as err:
        choose_queue(pinned, 3)
    msg = str(err.value)
    assert "queue='debug'" in msg and "at most 2 nodes" in msg and "debug-scaling" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="not in site polaris's queue table"):
        with_overrides(load_site("polaris"), queue="regular")


def test_per_user_job_limit_refuses_a_sweep_the_queue_would_reject():
    polaris = load_site("polaris")
    jobs = plan_batch_jobs(polaris, [1, 2])
    assert [(job.nodes, job.queue) for job in jobs] == [(1, "debug"), (2, "debug")]
    assert [job.note for job in jobs] == ["1-node runs go to queue debug (queue prod takes at least 10 nodes)",
                                          "2-node runs go to queue debug (queue prod takes at least 10 nodes)"]
    with pytest.raises(ConfigError, match="debug-scaling holds at most 1 job"):
        plan_batch_jobs(polaris, [3, 5])   # two batch jobs at once in debug-scaling


def test_charge_is_the_facility_rule():
    theta = load_site("theta")
    # ALCF: "Jobs smaller than the minimum allocation will be allocated and charged for the minimum"
    assert charged_node_hours(theta, 128) == (128, 128.0)
    default = dataclasses.replace(theta, queues=tuple(dataclasses.replace(q, min_nodes=1) if q.name == "default"
                                                      else q for q in theta.queues))
    assert charged_node_hours(default, 14) == (128, 128.0)
    premium = with_overrides(load_site("perlmutter"), queue="premium", walltime="02:00:00")
    assert charged_node_hours(premium, 4) == (4, 16.0)    # charge factor 2


def test_bad_queue_table_is_one_line(tmp_path):
    site = tmp_path / "s.yaml"
    base = ("provider: pbspro\nmpi_launcher: mpiexec\ncores_per_node: 4\nmax_nodes: 8\nqueue: q\n"
            "queues:\n  q:\n    min_nodes: 4\n")
    site.write_text(base + "    max_nodes: 2\n")
    with pytest.raises(ConfigError, match="site.queues.q.min_nodes"):
        load_site(str(site))
    site.write_text(base + "    max_walltme: '01:00:00'\n")
    with pytest.raises(ConfigError, match="site.queues.q.max_walltme"):
        load_site(str(site))
    site.write_text(base.replace("queue: q", "queue: other"))
    with pytest.raises(ConfigError, match="not in the queue table"):
        load_site(str(site))


@pytest.mark.sweep
def test_dry_run_shows_queues_and_charge(tmp_path):
    proc = scalestudy("sweep", "site=theta", "nodes=2,128", "workers_per_node=2", "epochs=1", "--dry-run",
                      cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "2-node runs go to queue debug-cache-quad" in out
    assert "-q debug-cache-quad" in out and "-q default" in out
    assert "charged at most: 128 node(s) x 01:00:00 = 128.00 node-hours" in out
    # the bound: every attempt (1 + 0 + 0 + 2 node_lost retries, the defaults) of each run in a job of its own
    assert "node-hours charged at most: 390.00 — every attempt of every run in a batch job of its own: 2 run(s) x " \
           "up to 3 attempt(s)" in out
    assert "130.00 when the sweep goes as planned" in out
    assert "a real sweep would stop here" in proc.stdout   # the mpich wheel: a warning of the summary
    # both allocation modes: per node count (this sweep's) and the whole sweep in one 128-node job
    assert "allocation: per_size (this sweep's): 2 batch job(s), 130.00 node-hours" in out
    assert "allocation: packed (with allocation=packed): 1 batch job(s), 128.00 node-hours" in out
    assert "batch job for every run (2, 128 node(s)) in 128 nodes" in out and "theta-128n-packed" in out
    table = out[out.index("allocation   batch jobs"):].splitlines()
    assert table[1].split()[:4] == ["per_size", "2", "130.00", "390.00"]
    assert table[2].split()[:4] == ["packed", "1", "128.00", "768.00"]   # 2 runs x 3 attempts x the 128-node job


@pytest.mark.sweep
def test_charge_bound_counts_every_attempt_of_every_run(tmp_path):
    """Without retries the bound is one batch job per run (3 runs of 2 nodes and 3 of 128,
    one hour each: 3 x 2 + 3 x 128 node-hours per_size; packed, each run may hold the
    128-node job: 6 x 128); with retries.crash=1 and node_lost=0, two attempts each."""
    base = ["sweep", "site=theta", "nodes=2,128", "workers_per_node=2", "epochs=1", "+params.r=1,2", "--dry-run"]
    proc = scalestudy(*base[:-2], "+params.r=1,2,3", "--dry-run", "retries.node_lost=0", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = proc.stdout[proc.stdout.index("allocation   batch jobs"):].splitlines()
    # 6 runs: 3 of 2 nodes, 3 of 128
    assert table[1].split()[:4] == ["per_size", "2", "130.00", f"{3 * 2 + 3 * 128:.2f}"]
    assert table[2].split()[:4] == ["packed", "1", "128.00", f"{6 * 128:.2f}"]
    proc = scalestudy(*base, "retries.node_lost=0", "retries.crash=1", cwd=tmp_path, timeout=120)
    table = proc.stdout[proc.stdout.index("allocation   batch jobs"):].splitlines()
    assert table[1].split()[:4] == ["per_size", "2", "130.00", f"{2 * (2 * 2 + 2 * 128):.2f}"]
    assert "4 run(s) x up to 2 attempt(s)" in proc.stdout


@pytest.mark.sweep
def test_packed_dry_run_uses_the_queue_that_takes_the_whole_sweep(tmp_path):
    """Packed, the 2-node runs ride in the 128-node job: one job in queue default, no debug job."""
    proc = scalestudy("sweep", "site=theta", "nodes=2,128", "workers_per_node=2", "epochs=1", "allocation=packed",
                      "--dry-run", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "allocation: packed (this sweep's): 1 batch job(s), 128.00 node-hours" in out
    assert "node-hours charged at most: 768.00 — every attempt of every run" in out
    assert "128.00 when the sweep goes as planned: one batch job for the whole sweep" in out
    packed = out[:out.index("allocation: per_size")]
    assert "-q default" in packed and "-q debug-cache-quad" not in packed
    too_small = scalestudy("sweep", "site=theta", "nodes=2,128", "allocation=packed", "allocation_nodes=64",
                           "--dry-run", cwd=tmp_path, timeout=120)
    assert too_small.returncode == 2 and len(too_small.stderr.strip().splitlines()) == 1
    assert "nodes=128: larger than the packed allocation of 64 node(s)" in too_small.stderr


@pytest.mark.sweep
def test_sweep_refused_by_queue_limits_writes_nothing(tmp_path):
    proc = scalestudy("sweep", "site=theta", "nodes=2,9", "epochs=1", "account=p1", cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "nodes=9" in err[0] and "no queue of site theta" in err[0], proc.stderr
    assert not (tmp_path / "scalestudy.db").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.sweep
def test_a_placeholder_account_is_refused_before_anything_is_submitted(tmp_path):
    """The shipped site files hold account: YOUR_PROJECT; a sweep charged to it stops at
    admission (nothing submitted, no run folder, no database); a dry run says so and goes on."""
    proc = scalestudy("sweep", "site=theta", "nodes=2", "epochs=1", f"hydra.sweep.dir={tmp_path / 'mr'}",
                      cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "account='YOUR_PROJECT': is site theta's placeholder" in proc.stderr
    assert not (tmp_path / "mr").exists() and not (tmp_path / "scalestudy.db").exists()
    dry = scalestudy("sweep", "site=theta", "nodes=2", "epochs=1", "--dry-run", cwd=tmp_path, timeout=120)
    assert dry.returncode == 0 and "a real sweep would stop here" in dry.stdout + dry.stderr
