"""Predictions: the wait terms against sampling, a prediction against its equation by hand,
the band, the CLI (predict, plan, a sweep's dry run) on a study made by the model itself,
and clear errors."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from perf_model.machine import Network
from perf_model.predict import PredictError, choose_algorithm, predict
from perf_model.terms import expected_max_normal, injected_wait_eager, injected_wait_sync

RNG = np.random.default_rng(11)


def test_synchronous_wait_with_injection_against_sampling():
    p, k, d, sigma = 8, 1, 0.1, 0.02
    draws = sigma * RNG.standard_normal((200_000, p))
    draws[:, :k] += d          # exactly k of P ranks sleep (which ones does not matter to the max)
    assert injected_wait_sync(p, k, d, sigma) == pytest.approx(draws.max(axis=1).mean(), rel=0.01)
    assert injected_wait_sync(p, 0, d, sigma) == pytest.approx(sigma * expected_max_normal(p), rel=1e-6)
    assert injected_wait_sync(p, 1, d, 0.0) == d and injected_wait_sync(p, 0, d, 0.0) == 0.0


def test_wait_from_a_measured_distribution_against_sampling():
    """A skewed (lognormal) compute time: the sample's expected slowest of P, with and without
    an injected sleeper, against drawing P ranks from the same distribution; on normal data it
    is e(P) up to P = 1024 (its tail quantiles are dense enough)."""
    from perf_model.terms import injected_wait_sample, sample_quantiles

    mean = math.exp(0.125)
    quantiles = sample_quantiles(RNG.lognormal(0, 0.5, 100_000) - mean)
    draws = RNG.lognormal(0, 0.5, (40_000, 64)) - mean
    assert injected_wait_sample(64, 0, 0.0, quantiles) == pytest.approx(draws.max(axis=1).mean(), rel=0.02)
    draws = RNG.lognormal(0, 0.5, (40_000, 8)) - mean
    draws[:, 0] += 1.0
    assert injected_wait_sample(8, 1, 1.0, quantiles) == pytest.approx(draws.max(axis=1).mean(), rel=0.02)
    # skewed right: later than the normal form of the same spread
    assert injected_wait_sample(64, 0, 0.0, quantiles) > 0.5 * math.sqrt(math.exp(0.25) - 1) * math.exp(0.125) \
        * expected_max_normal(64) * 1.05
    normal = sample_quantiles(RNG.standard_normal(100_000))
    for p in (2, 32, 1024):
        assert injected_wait_sample(p, 0, 0.0, normal) == pytest.approx(expected_max_normal(p), rel=0.03)


def test_eager_wait_over_a_segment_against_sampling():
    """Per step, the slowest rank's own work over a segment of K steps, each rank sleeping in
    a Binomial(K, k/P) number of them (independent across ranks, as the docstring says)."""
    p, k, d, sigma, segment = 8, 1, 0.1, 0.02, 10
    sleeps = RNG.binomial(segment, k / p, size=(200_000, p))
    noise = sigma * math.sqrt(segment) * RNG.standard_normal((200_000, p))
    sampled = (d * sleeps + noise).max(axis=1).mean() / segment
    assert injected_wait_eager(p, k, d, sigma, segment) == pytest.approx(sampled, rel=0.01)
    # no noise: E[max of 2 Binomial(10, 1/2)] / 10 = (5 + E|X - Y| / 2) / 10, by enumeration
    from scipy.stats import binom
    pm = binom.pmf(np.arange(11), 10, 0.5)
    exact = sum(pm[i] * pm[j] * max(i, j) for i in range(11) for j in range(11)) * d / 10
    assert injected_wait_eager(2, 1, d, 0.0, 10) == pytest.approx(exact, rel=1e-3)
    # eager waits at most what synchronous SGD waits each step
    assert injected_wait_eager(p, k, d, sigma, segment) < injected_wait_sync(p, k, d, sigma)


def _fit(**shape_overrides) -> dict:
    shape = {"model": "m", "batch_size": 32, "threads_per_worker": 1, "workers_per_node": 4, "ranks": [2, 4],
             "gradient_bytes": 4e6, "collectives_per_step": 2.0, "hidden": 0.25, "update_seconds": 0.002,
             "sync_every": 10, "injected_ranks": 0, "injected_delay": 0.0, "steps": 100, "overhead_seconds": 10.0,
             "notes": []}
    shape.update(shape_overrides)
    terms = {"compute": {"params": {"c0": 0.01, "c1": 0.002, "alpha": 0.0}, "notes": []},
             "allreduce": {"params": {"latency": 1e-5, "bandwidth": 1e9}, "notes": []},
             "straggler": {"params": {"sigma": 0.003}, "notes": []}}
    boot = [{"compute": {"c0": 0.01 * f, "c1": 0.002 * f, "alpha": 0.0}} for f in np.linspace(0.95, 1.05, 21)]
    return {"id": 1, "study": "s", "terms": terms, "unfitted": {}, "run_ids": [1], "warmup": 5,
            "workloads": {shape.get("algorithm", "sync"): shape}, "bootstrap": boot}


def test_prediction_follows_its_equation():
    fit = _fit()
    [row] = predict(fit, "sync", [4], 4).to_dict("records")     # 16 ranks
    c = 0.01 + 32 * 0.002
    comm = 2 * 2 * 4 * 1e-5 + 2 * 15 / 16 * 4e6 / 1e9      # 2 collectives, 2 log2(16) messages each
    expected = c + 0.003 * expected_max_normal(16) + 0.75 * comm + 0.002
    assert row["ranks"] == 16 and row["step_seconds"] == pytest.approx(expected, rel=1e-9)
    assert row["throughput"] == pytest.approx(16 * 32 / expected)
    assert row["efficiency"] == pytest.approx((c + 0.002) / expected)
    # the band comes from the refits: compute +-5 % moves the step by about that much
    assert row["step_low"] < row["step_seconds"] < row["step_high"]
    assert row["step_high"] - row["step_low"] == pytest.approx(0.9 * 0.1 * c, rel=0.05)
    # a site's network, 4 nodes of 4 ranks: sync's MPI_Iallreduce (MPICH's halving + doubling) moves
    # 4e6 (1/2 + 1/4) = 3e6 B out of each node in the halving's two inter-node steps, as much in
    # the doubling: 6e6 B through a node's 8 GB/s, 0.75 ms (workloads/allreduce_traffic.py)
    net = Network(latency=2e-6, node_bandwidth=8e9, source="test")
    [far] = predict(fit, "sync", [4], 4, net).to_dict("records")
    comm_site = 2 * 2 * 4 * 2e-6 + 6e6 / 8e9
    assert far["comm_seconds"] == pytest.approx(0.75 * comm_site)
    # control: before issue 51 each of the node's 4 ranks sent 2(16-1)/16 x 4e6 B across it
    assert far["comm_seconds"] != pytest.approx(0.75 * (2 * 2 * 4 * 2e-6 + 4 * 2 * 15 / 16 * 4e6 / 8e9), rel=0.01)
    # ddp's ring (torch.distributed): one of a node's 4 ring edges leaves it, 2(16-1)/16 x 4e6 = 7.5e6 B
    [ring] = predict(_fit(algorithm="ddp"), "ddp", [4], 4, net).to_dict("records")
    assert ring["comm_seconds"] == pytest.approx(0.75 * (2 * 2 * 4 * 2e-6 + 7.5e6 / 8e9))
    # one node of 4 ranks with a site's network: its numbers stand in for shared memory, undivided
    [near] = predict(fit, "sync", [1], 4, net).to_dict("records")
    assert near["comm_seconds"] == pytest.approx(0.75 * (2 * 2 * 2 * 2e-6 + 2 * 3 / 4 * 4e6 / 8e9))
    # one rank: no wait, no communication
    [one] = predict(fit, "sync", [1], 1).to_dict("records")
    assert one["wait_seconds"] == 0 and one["comm_seconds"] == 0 and one["efficiency"] == 1.0


def test_eager_prediction_under_injection_waits_less_than_sync():
    sync = _fit(injected_ranks=1, injected_delay=0.05)
    eager = _fit(algorithm="eager_solo", injected_ranks=1, injected_delay=0.05, collectives_per_step=1.0)
    s = predict(sync, "sync", [2, 8], 4)
    e = predict(eager, "eager_solo", [2, 8], 4)
    assert (s["wait_seconds"] > 0.05).all()                        # every sync step waits for the sleeper
    assert (e["wait_seconds"] < s["wait_seconds"]).all()
    assert e["wait_seconds"].iloc[1] == pytest.approx(injected_wait_eager(32, 1, 0.05, 0.003, 10))


def test_prediction_errors_name_what_is_missing():
    fit = _fit()
    with pytest.raises(PredictError, match="has no runs of it"):
        choose_algorithm(fit, "horovod")
    both = {**fit, "workloads": {**fit["workloads"], "async_ps": fit["workloads"]["sync"]}}
    with pytest.raises(PredictError, match="choose one with --algorithm"):
        choose_algorithm(both, None)
    with pytest.raises(PredictError, match="not modelled"):
        choose_algorithm(both, "async_ps")
    only_ps = {**fit, "workloads": {"async_ps": fit["workloads"]["sync"]}}
    with pytest.raises(PredictError, match="not modelled"):   # the study's only algorithm, not asked for
        choose_algorithm(only_ps, None)
    with pytest.raises(PredictError, match="predates predictions"):
        choose_algorithm({**fit, "workloads": None}, None)
    no_allreduce = {**fit, "terms": {k: v for k, v in fit["terms"].items() if k != "allreduce"},
                    "unfitted": {"allreduce": "need >= 2 rank counts to fit the allreduce term (have: none)"}}
    with pytest.raises(PredictError, match="give --site SITE whose site YAML has a network: block"):
        predict(no_allreduce, "sync", [2], 1)
    assert predict(no_allreduce, "sync", [2], 1, Network(1e-6, 1e9, "t"))["comm_seconds"].iloc[0] > 0


def test_walltime_request_and_queue_minimum():
    from orchestrator.site.queues import queue_for_walltime
    from orchestrator.sweep.prediction import walltime_request
    from orchestrator.site.checks import walltime_seconds
    from orchestrator.site.config import load_site

    assert walltime_request(60) == "00:10:00"          # 60 s x 1.5 + 5 min, up to 5 min steps
    assert walltime_request(3600) == "01:35:00"
    theta = load_site("theta")
    site, queue, why = queue_for_walltime(theta, 128, "00:10:00")
    assert (queue, site.walltime, why) == ("default", "00:30:00", "")   # raised to the queue's minimum
    site, queue, why = queue_for_walltime(theta, 16, "00:10:00")
    assert queue == "" and why.startswith("no queue of site theta takes a 16-node job")
    assert walltime_request(1e9) == "999:00:00"      # what a walltime field holds, not an endless one
    assert walltime_seconds(walltime_request(1e9)) == 999 * 3600   # 1,000 h and more would not parse


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A model-made study, fitted through the CLI once for the tests below."""
    from results_db import connect

    from conftest import scalestudy
    from perf_synthetic import write_study

    tmp = tmp_path_factory.mktemp("fitted")
    url = f"sqlite:///{tmp / 'p.db'}"
    write_study(connect(url))
    out = scalestudy("model", "fit", "--study", "syn", "--db", url, "--replicates", "20", cwd=tmp)
    assert out.returncode == 0, out.stderr
    return tmp, url


@pytest.mark.sweep
def test_model_predict_prints_the_table_and_draws_the_figure(fitted):
    import pandas as pd

    from conftest import scalestudy
    from results_db import connect
    from results_db.store.model_fits import latest_model_fit

    tmp, url = fitted
    out = scalestudy("model", "predict", "--study", "syn", "--db", url, "--nodes", "1,2,...,16",
                     "--workers-per-node", "4", "--site", "theta", "--out", str(tmp / "fig"), cwd=tmp)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s", line)]
    assert [int(r[0]) for r in rows] == [1, 2, 4, 8, 16] and [int(r[1]) for r in rows] == [4, 8, 16, 32, 64]
    assert "network of site theta" in out.stdout
    # the band says what it is: the fit's spread, not a range a new run falls in
    assert "the band is the fit's spread over its own runs" in out.stdout and "not a prediction interval" in out.stdout
    table = pd.read_csv(tmp / "fig" / "prediction-sync-theta.csv")
    assert (tmp / "fig" / "prediction-sync-theta.png").stat().st_size > 10_000
    # the CLI's numbers are predict()'s, on the stored fit and Theta's network
    from orchestrator.site.model_inputs import host_of, network_of
    from orchestrator.site.config import load_site

    fit = latest_model_fit(connect(url), "syn")
    theta = load_site("theta")
    again = predict(fit, "sync", [1, 2, 4, 8, 16], 4, network_of(theta), host=host_of(theta))
    assert np.allclose(table["step_seconds"], again["step_seconds"])
    assert (table["throughput_low"] <= table["throughput"]).all() and (table["throughput"] <= table["throughput_high"]).all()
    # errors: one line, exit 2
    for args, said in ((["--nodes", "0,2"], "expected counts >= 1"), (["--nodes", "a,b"], "expected counts like"),
                       (["--site", "local_slurm"], "has no network: block"), (["--algorithm", "ddp"], "no runs of it"),
                       (["--band", "2"], "expected a fraction"),
                       (["--workers-per-node", "4", "--out", "/proc/no/such"], "--out /proc/no/such:")):
        bad = scalestudy("model", "predict", "--study", "syn", "--db", url, *args, cwd=tmp)
        assert bad.returncode == 2 and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    none = scalestudy("model", "predict", "--study", "other", "--db", url, cwd=tmp)
    assert none.returncode == 2 and "has no model fit: run scalestudy model fit --study other" in none.stderr


@pytest.mark.sweep
def test_plan_fits_the_budget_and_the_queues(fitted):
    import dataclasses

    from conftest import scalestudy

    tmp, url = fitted
    out = scalestudy("plan", "study=syn", "site=polaris", "account=abc", "workers_per_node=4", "--steps", "20000",
                     "--repeats", "2",
                     "--budget", "40",
                     "--db", url, "--out", str(tmp / "plan.txt"), cwd=tmp)
    assert out.returncode == 0, out.stderr
    sizes = [line.split() for line in out.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s", line)]
    chosen = [s for s in sizes if s[-1] == "run"]
    assert chosen and [int(s[0]) for s in chosen] == [2 ** i for i in range(len(chosen))]   # from 1 node up
    assert sum(float(s[5]) for s in chosen) <= 40                                          # at most the budget
    assert any(s[-1] == "budget" for s in sizes)                                           # the next is over it
    text = (tmp / "plan.txt").read_text()
    assert "site=polaris" in text and "nodes=" in text and "repeat=0," in text and "walltime=" in text
    assert "account=abc" in text    # the sweeps run as printed (issue 39)
    assert "epochs=1 steps_per_epoch=20000" in text and "dataset=" in text
    # debug-scaling holds one job per user: its sizes go in sweeps of one node count each
    scaling = [line for line in text.splitlines() if "queue=debug-scaling" in line]
    assert len(scaling) == 2 and all(len(line.split("nodes=")[1].split()[0].split(",")) == 1 for line in scaling)
    # each written sweep asks for what its sizes were priced at: charged at most, within the budget
    from orchestrator.site.queues import charged_node_hours
    from orchestrator.site.config import load_site

    polaris, total = load_site("polaris"), 0.0
    priced = {int(s[0]): s[3] for s in chosen}
    for line in text.splitlines():
        words = dict(w.split("=", 1) for w in line.split()[2:])
        nodes = [int(n) for n in words["nodes"].split(",")]
        assert all(priced[n] == words["walltime"] for n in nodes)
        queue = words.get("queue", polaris.queue)
        for n in nodes:
            site = dataclasses.replace(polaris, walltime=words["walltime"], partition=queue)
            total += charged_node_hours(site, n)[1]
    assert total <= 40
    # queues: Polaris' debug takes 1-2 nodes, prod 10 and more
    queues = {int(s[0]): s[4] for s in chosen}
    assert queues[1] == "debug" and all(q == "prod" for n, q in queues.items() if n >= 16)
    poor = scalestudy("plan", "study=syn", "site=polaris", "account=abc", "workers_per_node=4", "--steps", "100000", "--budget",
                      "0.01", "--db", url, "--out", str(tmp / "p2.txt"), cwd=tmp)
    assert poor.returncode == 2 and "buys no run" in poor.stderr
    vague = scalestudy("plan", "study=syn", "site=polaris", "account=abc", "--budget", "10", "--db", url, cwd=tmp)
    assert vague.returncode == 2 and "had 2, 4 ranks per node: give workers_per_node=W" in vague.stderr
    for args, said in ((["study=syn", "--budget", "-1"], "expected node-hours > 0"),
                       (["site=theta", "--budget", "1"], "study=S is required"),
                       (["study=syn", "color=red", "--budget", "1"], "'color=red': expected"),
                       (["study=syn", "site=nowhere", "--budget", "1"], "nowhere"),
                       (["study=syn", "site=polaris", "--budget", "1"], "account='YOUR_PROJECT': is site polaris's "
                                                                         "placeholder"),
                       (["study=syn", "workers_per_node=4", "--budget", "50", "--out", "/proc/no/plan.txt"],
                        "--out /proc/no/plan.txt:")):
        bad = scalestudy("plan", *args, "--db", url, cwd=tmp)
        assert bad.returncode == 2 and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.sweep
def test_dry_run_shows_predicted_times_and_asks_for_their_walltime(tmp_path):
    """A fit of runs on the sweep's own site, computing for real on its device, sets the batch
    jobs' walltime from its predicted run times."""
    from conftest import scalestudy
    from orchestrator.site.config import load_site
    from orchestrator.site.model_inputs import host_of, network_of
    from orchestrator.sweep.prediction import predicted_run_seconds
    from perf_synthetic import write_study
    from results_db import connect
    from results_db.store.model_fits import latest_model_fit

    tmp, url = tmp_path, f"sqlite:///{tmp_path / 'p.db'}"
    write_study(connect(url), site="polaris")
    assert scalestudy("model", "fit", "--study", "syn", "--db", url, "--replicates", "0", cwd=tmp).returncode == 0
    base = ["sweep", "--dry-run", "--show-scripts", "study_name=syn", "site=polaris", "device=cpu", "account=abc", "algorithm=sync",
            "batch_size=16", "workers_per_node=4", "threads_per_node=4", "nodes=16,32", "epochs=1",
            "steps_per_epoch=100000", f"db_url={url}"]
    out = scalestudy(*base, cwd=tmp)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    predicted = [float(m) for m in re.findall(r"predicted: ([\d.]+) min", text)]
    fit = latest_model_fit(connect(url), "syn")
    polaris = load_site("polaris")
    expected = [predicted_run_seconds(fit, "sync", n, 4, 100000, network_of(polaris), 16, 1, host_of(polaris)) / 60
                for n in (16, 32)]
    assert predicted == pytest.approx(expected, abs=0.05)
    [wall] = re.findall(r"walltime (\d\d:\d\d:\d\d) per batch job from the predicted run times", text)
    assert re.search(rf"-l walltime={wall}", text)
    # the user's walltime wins
    mine = scalestudy(*base, "walltime=02:00:00", cwd=tmp)
    assert mine.returncode == 0 and "-l walltime=02:00:00" in mine.stdout + mine.stderr
    assert "per batch job from the predicted run times" not in mine.stdout + mine.stderr
    assert f"walltime 02:00:00 as given (the prediction would ask for {wall})" in mine.stdout + mine.stderr
    # without steps_per_epoch a run's steps depend on the data: no walltime from the prediction
    loose = scalestudy(*[a for a in base if not a.startswith("steps_per_epoch")], cwd=tmp)
    assert loose.returncode == 0 and "walltime stays the site's" in loose.stdout + loose.stderr
    assert "-l walltime=01:00:00" in loose.stdout + loose.stderr


@pytest.mark.parametrize("why, overrides", [
    ("another site's runs", ["site=polaris", "device=cpu"]),          # the fit's runs ran on site local
    ("another device", ["site=polaris"]),                              # polaris runs default to its GPUs
])
def test_a_fit_of_another_machine_sets_no_walltime(fitted, why, overrides):
    """The shared fit was made of runs on site local: a Polaris sweep takes nothing from it (no
    predicted times, no walltime), says why in a note, and keeps the site's walltime."""
    from conftest import scalestudy

    tmp, url = fitted
    out = scalestudy("sweep", "--dry-run", "--show-scripts", "study_name=syn", *overrides, "account=abc", "algorithm=sync",
                     "batch_size=16", "workers_per_node=4", "threads_per_node=4", "nodes=16", "epochs=1",
                     "steps_per_epoch=100000", f"db_url={url}", cwd=tmp)
    text = out.stdout + out.stderr
    assert out.returncode == 0, out.stderr
    assert "was fitted on site local, compute=real, device=cpu: not this sweep's machine" in text, why
    assert "predicted:" not in text and "-l walltime=01:00:00" in text and "walltime stays the site's 01:00:00" in text


@pytest.mark.sweep
def test_a_prediction_for_a_site_without_real_runs_says_it_is_unvalidated(fitted):
    """The fit's runs ran on site local: a prediction for Polaris says, in the table and its CSV,
    that nothing of Polaris is behind it, and which network numbers are stand-ins."""
    import pandas as pd

    from conftest import scalestudy

    tmp, url = fitted
    out = scalestudy("model", "predict", "--study", "syn", "--site", "polaris", "--nodes", "2,4", "--workers-per-node", "4", "--db", url,
                     "--out", str(tmp / "unval"), cwd=tmp)
    assert out.returncode == 0, out.stderr
    assert "UNVALIDATED on site polaris: the fit has no real run there (it was fitted on site local" in out.stdout
    assert "latency 2 us (stand-in, unsourced)" in out.stdout and "bandwidth 50 GB/s per node (sourced)" in out.stdout
    [csv] = list((tmp / "unval").glob("*.csv"))
    table = pd.read_csv(csv)
    assert set(table["validated_on_site"]) == {False} and set(table["site"]) == {"polaris"}
    # on its own site the same fit is validated
    own = scalestudy("model", "predict", "--study", "syn", "--site", "local", "--nodes", "2,4", "--workers-per-node", "4", "--db", url,
                     "--out", str(tmp / "own"), cwd=tmp)
    assert own.returncode == 0 and "UNVALIDATED" not in own.stdout, own.stdout + own.stderr
    assert set(pd.read_csv(next((tmp / "own").glob("*.csv")))["validated_on_site"]) == {True}


@pytest.mark.mpi
def test_a_prediction_is_checked_by_the_next_real_run(tmp_path):
    """A sweep on the fitted machine stores each run's predicted time with the fit that made it;
    the run's measured time then checks it, shown as the run ends and by model predict."""
    import sqlite3

    from conftest import scalestudy
    from perf_synthetic import write_study
    from results_db import connect

    url = f"sqlite:///{tmp_path / 'c.db'}"
    write_study(connect(url), site="local")
    assert scalestudy("model", "fit", "--study", "syn", "--db", url, "--replicates", "0", cwd=tmp_path).returncode == 0
    sweep = scalestudy("sweep", "study_name=syn", "site=local", "nodes=1", "workers_per_node=2", "threads_per_node=2",
                       "batch_size=16", "epochs=1", "steps_per_epoch=3", f"db_url={url}",
                       f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    with sqlite3.connect(tmp_path / "c.db") as conn:
        [(fit_id,)] = conn.execute("select max(id) from model_fits").fetchall()
        [(predicted, by, measured)] = conn.execute(
            "select predicted_seconds, predicted_by_fit, wall_seconds from runs where run_dir is not null "
            "and run_dir != '/nowhere'").fetchall()
    assert by == fit_id and predicted > 0 and measured > 0
    assert f"{measured:.0f} s against {predicted:.0f} s predicted" in sweep.stderr
    shown = scalestudy("model", "predict", "--study", "syn", "--nodes", "1,2", "--workers-per-node", "2", "--db", url,
                       "--out", str(tmp_path / "p"), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    error = (predicted - measured) / measured
    assert f"predicted {predicted:.1f} s, measured {measured:.1f} s, error {error:+.1%}" in shown.stdout


@pytest.mark.sweep
def test_a_fit_of_emulated_runs_sets_no_walltime(tmp_path):
    """Emulated runs on the sweep's own site still say nothing of how long real runs take."""
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from conftest import scalestudy
    from perf_synthetic import write_study
    from results_db import connect
    from results_db.store.schema import Run

    url = f"sqlite:///{tmp_path / 'e.db'}"
    engine = connect(url)
    ids = write_study(engine, site="polaris")
    with Session(engine) as s, s.begin():
        s.execute(update(Run).where(Run.id.in_(ids)).values(compute="emulated"))
    assert scalestudy("model", "fit", "--study", "syn", "--db", url, "--replicates", "0", cwd=tmp_path).returncode == 0
    out = scalestudy("sweep", "--dry-run", "--show-scripts", "study_name=syn", "site=polaris", "device=cpu", "account=abc",
                     "batch_size=16", "workers_per_node=4", "threads_per_node=4", "nodes=16", "epochs=1",
                     "steps_per_epoch=100000", f"db_url={url}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "compute=emulated" in out.stdout + out.stderr and "-l walltime=01:00:00" in out.stdout + out.stderr


def test_majority_waits_for_its_initiator():
    """E[(X_init - X_self)^+] for two normal compute times, against sampling; the majority
    prediction is solo's plus that."""
    from perf_model.predict import majority_wait

    sigma = 0.05
    x = sigma * RNG.standard_normal((400_000, 2))
    assert majority_wait(sigma) == pytest.approx(np.maximum(x[:, 0] - x[:, 1], 0).mean(), rel=0.01)
    solo = predict(_fit(algorithm="eager_solo"), "eager_solo", [2], 4)
    majority = predict(_fit(algorithm="eager_majority"), "eager_majority", [2], 4)
    assert majority["wait_seconds"].iloc[0] - solo["wait_seconds"].iloc[0] == pytest.approx(majority_wait(0.003))


@pytest.mark.sweep
def test_predict_shows_the_bands_coverage_of_the_studys_own_runs(tmp_path):
    """model predict says how many of this study's finished runs its band holds, counted on
    the stored runs: a run moved onto its prediction after the fit counts in, moved 10x
    slower counts out; a run added since the fit is counted apart; a fit without bootstrap
    refits (no band) shows no coverage at all."""
    from sqlalchemy import text

    from conftest import scalestudy
    from perf_model.measured import measured_throughput
    from perf_synthetic import write_study
    from results_db import connect
    from results_db.store import query
    from results_db.store.model_fits import latest_model_fit

    url = f"sqlite:///{tmp_path / 'c.db'}"
    engine = connect(url)
    write_study(engine)
    assert scalestudy("model", "fit", "--study", "syn", "--db", url, "--replicates", "20", cwd=tmp_path).returncode == 0
    fit = latest_model_fit(engine, "syn")
    runs = query.runs(engine, study="syn").set_index("run_id")

    def shown() -> str:
        out = scalestudy("model", "predict", "--study", "syn", "--db", url, "--nodes", "1,2", "--workers-per-node", "2",
                         "--out", str(tmp_path / "fig"), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "38 %" not in out.stdout            # no figure of another study passed off as this one's
        return out.stdout

    def inside() -> dict[int, bool]:
        """Each run in or out of the band, from predict() at its configuration (one node, P ranks)."""
        got = measured_throughput(engine, list(runs.index), fit["warmup"]).set_index("run_id")["throughput"]
        out = {}
        for run_id, run in runs.iterrows():
            at = {**fit, "workloads": {"sync": {**fit["workloads"]["sync"], "batch_size": int(run["batch_size"]),
                                                "threads_per_worker": 1}}}
            [row] = predict(at, "sync", [1], int(run["workers_per_node"])).to_dict("records")
            out[run_id] = row["throughput_low"] <= got[run_id] <= row["throughput_high"]
        return out

    def set_step(run_id: int, seconds: float) -> None:
        with engine.begin() as conn:
            conn.execute(text("UPDATE steps SET seconds = :s WHERE run_id = :r AND rank = 0"), {"s": seconds, "r": run_id})

    held = sum(inside().values())
    assert (f"measured: the 90% band held {held} of this study's 6 finished sync run(s) ({held / 6:.0%}), all of "
            "them runs the fit saw") in shown()
    run_id = next(r for r, ok in inside().items() if not ok)
    run = runs.loc[run_id]
    at = {**fit, "workloads": {"sync": {**fit["workloads"]["sync"], "batch_size": int(run["batch_size"]),
                                        "threads_per_worker": 1}}}
    [row] = predict(at, "sync", [1], int(run["workers_per_node"])).to_dict("records")
    set_step(run_id, row["step_seconds"])                     # measured exactly as predicted: inside
    assert f"band held {held + 1} of this study's 6" in shown()
    set_step(run_id, 10 * row["step_seconds"])                # ten times slower: outside
    assert f"band held {held} of this study's 6" in shown()
    # a run added after the fit: counted apart from the runs the fit saw
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET run_key = 'fitted-' || run_key"))
    write_study(engine, configs=((8, 2),), seed=5)
    stdout = shown()
    assert "band held" in stdout and f"{held} of the 6 the fit saw, " in stdout and " of the 1 run(s) since" in stdout
    assert scalestudy("model", "fit", "--study", "syn", "--db", url, "--replicates", "0", cwd=tmp_path).returncode == 0
    assert "band held" not in shown()                          # no refits, no band: nothing to measure


@pytest.mark.sweep
def test_plan_prices_repeats_on_demand_at_their_most(fitted):
    """``plan --until``: the budget must hold every size at ``--most`` repeats, the most the sweep may
    run; the sweep written asks for the first stage and the rule. The control: the same budget at
    the first stage's 3 repeats buys more sizes."""
    from conftest import scalestudy

    tmp, url = fitted
    common = ["plan", "study=syn", "site=polaris", "account=abc", "workers_per_node=4", "--steps", "20000",
              "--budget", "40", "--db", url]
    demand = scalestudy(*common, "--until", "0.03", "--most", "6", "--out", str(tmp / "od.txt"), cwd=tmp)
    fixed = scalestudy(*common, "--repeats", "3", "--out", str(tmp / "fixed.txt"), cwd=tmp)
    assert demand.returncode == 0 and fixed.returncode == 0, demand.stderr + fixed.stderr

    def chosen(stdout):
        return [line.split() for line in stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s", line) and
                line.split()[-1] == "run"]
    assert "priced at 6 repeat(s)" in demand.stdout
    assert sum(float(s[5]) for s in chosen(demand.stdout)) <= 40
    assert len(chosen(demand.stdout)) < len(chosen(fixed.stdout))
    text = (tmp / "od.txt").read_text()
    assert "repeat=0,1,2 repeats.until=0.03 repeats.most=6" in text
    bad = scalestudy(*common, "--until", "3", cwd=tmp)
    assert bad.returncode == 2 and "--until 3" in bad.stderr


# -- issue 54: a plan says how little its fit knows --------------------------------------------------

def test_a_value_is_rounded_to_what_its_band_supports():
    from perf_model.predict import banded

    assert banded(0.8234, 0.6123, 0.9511) == "0.82 (0.61–0.95)"
    assert banded(0.8234, 0.6123, 0.9511, 100, " %") == "82 % (61–95)"
    assert banded(12345.6, 10234.0, 13456.0) == "12300 (10200–13500)"   # a wide band: hundreds
    assert banded(0.8234, None, None) == "0.82 (no band)"                 # a fit without refits


def test_a_band_a_fit_cannot_have_is_said_unknown_with_two_digits_at_most():
    """Issue 62: a bootstrap of 2 whole runs gives the same data back (a band of no width), and
    banded() printed every digit: ``12802 (no band)``. Now 2 significant digits and the runs."""
    from perf_model.predict import banded

    assert banded(12802.4, 12802.4, 12802.4, runs=2) == "13000 (band unknown: 2 runs)"
    assert banded(0.6537, 0.6537, 0.6537, 100, " %", runs=3) == "65 % (band unknown: 3 runs)"
    assert banded(0.0123456, None, None, runs=1) == "0.012 (band unknown: 1 run)"
    assert banded(12802.4, None, None) == "13000 (no band)"
    for value in (0.000123456, 1.23456, 98765.4, 123456789.0):   # never more than 2 significant digits
        digits = banded(value, value, value, runs=6).split(" ")[0].replace(".", "").strip("0")
        assert len(digits) <= 2, (value, digits)


def test_a_fit_of_two_sizes_or_with_a_term_that_misses_is_doubted():
    from perf_model.predict import MAX_TERM_ERROR, MIN_SIZES, fit_doubts

    def fit(ranks, worst):
        return {"workloads": {"sync": {"ranks": ranks}},
                "terms": {"compute": {"quality": {"points": 6, "max_relative": 0.01}},
                          "straggler": {"quality": {"points": 6, "max_relative": worst}},
                          "overlap": {"quality": {"points": 0, "max_relative": 0.0}}}}

    assert MIN_SIZES == 3 and MAX_TERM_ERROR == 0.5
    assert fit_doubts(fit([2, 4, 8], 0.2), "sync") == []
    [few] = fit_doubts(fit([2, 4], 0.2), "sync")
    assert "2 size(s) (2, 4 ranks), fewer than 3" in few
    [misses] = fit_doubts(fit([2, 4, 8], 13.21), "sync")
    assert "straggler term misses its own points by up to 1321%" in misses


@pytest.mark.sweep
def test_plan_and_predict_carry_the_fits_uncertainty(fitted):
    """The model-made study has 2 rank counts: both say WEAK FIT, print their numbers with "band
    unknown" (every refit passes through the same two sizes: issue 62) to 2 significant digits,
    and the plan's sweeps record into a study of their own per site."""
    import pandas as pd

    from conftest import scalestudy

    tmp, url = fitted
    plan = scalestudy("plan", "study=syn", "site=polaris", "account=abc", "workers_per_node=4", "--steps", "20000",
                      "--repeats", "2", "--budget", "40", "--db", url, "--out", str(tmp / "p54.txt"), cwd=tmp)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.count("WEAK FIT: model fit") == 2 and "fewer than 3" in plan.stdout
    rows = [line for line in plan.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s", line)]
    assert rows and all(row.count("(band unknown: 6 runs at 2 sizes)") == 2 for row in rows), rows
    text = (tmp / "p54.txt").read_text()
    assert all(line.split()[2] == "study_name=syn_polaris" for line in text.splitlines())
    assert "study=syn " not in text and "study_name=syn " not in text
    predict = scalestudy("model", "predict", "--study", "syn", "--db", url, "--nodes", "1,2,4", "--workers-per-node",
                         "4", "--out", str(tmp / "f54"), cwd=tmp)
    assert predict.returncode == 0, predict.stderr
    assert predict.stdout.count("WEAK FIT: model fit") == 2 and "(band unknown: 6 runs at 2 sizes)" in predict.stdout
    table = pd.read_csv(tmp / "f54" / "prediction-sync.csv")   # the CSV keeps the refits' spread, as computed
    assert ((table["efficiency_low"] <= table["efficiency"]) & (table["efficiency"] <= table["efficiency_high"])).all()
    assert (table["efficiency_high"] > table["efficiency_low"]).any()


def test_a_plans_sweep_of_a_preset_pins_the_axes_its_grid_sweeps():
    """study=PRESET sweeps the preset's grid: the plan's lines pin each axis of it they do not set,
    so that the sweep runs what was priced (not 3 seeds x 2 catch-ups of it)."""
    from orchestrator.cli.plan_cmd import _pinned_preset_axes

    given = ["study=eager_sgd_paper_resnet32", "study_name=eager_sgd_paper_resnet32_polaris", "algorithm=sync"]
    assert _pinned_preset_axes("eager_sgd_paper_resnet32", given, {"catch_up": "paper"}) == \
        ["seed=0", "eager_catch_up=paper"]
    assert _pinned_preset_axes("eager_sgd_paper_resnet32", given, {}) == ["seed=0", "eager_catch_up=paper"]
    assert _pinned_preset_axes("smoke", ["nodes=1,2", "workers_per_node=4"], {}) == []


@pytest.mark.sweep
@pytest.mark.parametrize("configs,known", [(((8, 2), (8, 4)), False), (((8, 2), (8, 4), (8, 8)), True),
                                           (((8, 2), (8, 4), (8, 8), (16, 2), (16, 4), (16, 8)), True)],
                         ids=["2-runs", "3-runs", "6-runs"])
def test_a_plan_after_2_3_and_6_fitted_runs_shows_what_the_fit_knows(tmp_path, configs, known):
    """Issue 62: after a fit of 2 runs (2 sizes) the band is "unknown" and each value has at most
    2 significant digits; at 3 sizes (3 and 6 runs) the refits' band is printed and the value
    rounded to it. Every row's run time and expected node-hours are real (not 0 s, not 0.00)."""
    from conftest import scalestudy
    from perf_synthetic import write_study
    from results_db import connect

    url = f"sqlite:///{tmp_path / 'p.db'}"
    write_study(connect(url), configs=configs)
    fit = scalestudy("model", "fit", "--study", "syn", "--db", url, "--replicates", "20", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr
    plan = scalestudy("plan", "study=syn", "site=polaris", "account=abc", "workers_per_node=4", "--steps", "20",
                      "--budget", "10", "--db", url, "--out", str(tmp_path / "p.txt"), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    rows = [line for line in plan.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s", line)]
    assert rows
    for row in rows:
        words = row.split()
        assert words[2] not in ("0s", "0.0s") and float(words[2].rstrip("smin h")) > 0, row
        expected = words[6]
        assert expected == "-" or float(expected) > 0, row
        if known:
            assert "band unknown" not in row and re.search(r"\(\d[\d.]*–\d[\d.]*\)", row), row
        else:
            assert row.count(f"(band unknown: {len(configs)} runs at 2 sizes)") == 2, row
            digits = words[7].replace(".", "").strip("0")
            assert len(digits) <= 2, row
