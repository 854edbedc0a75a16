"""Which way a metric is better: a declaration always wins; netbench's name patterns are
defaults for netbench's own runs only, and named as defaults; any other undeclared metric is
refused, whatever its name (issue 61: a user's ``latency_us`` declared ``better: higher`` was
read as lower-is-better because netbench has a metric of that name)."""

from __future__ import annotations

import pytest

from results_db.store.metric_facts import NETBENCH_DEFAULT, MetricDirectionError, measure_of

NETBENCH = {"workload": {"kind": "command", "command": ["python", "-m", "workloads.netbench", "--backend", "mpi"]}}


def users(better: str | None = None) -> dict:
    metric = {"pattern": "latency: ([0-9.]+)", **({"better": better} if better else {})}
    return {"workload": {"kind": "command", "command": ["./my_bench"], "metrics": {"latency_us": metric}}}


def test_a_users_declaration_wins_over_netbenchs_name():
    fact = measure_of("metrics.latency_us", [users("higher")] * 3)
    assert fact.better == "higher" and fact.default == ""
    assert measure_of("metrics.latency_us", [users("lower")]).better == "lower"


def test_an_undeclared_user_metric_is_refused_though_netbench_has_its_name():
    with pytest.raises(MetricDirectionError, match="declares no direction"):
        measure_of("metrics.latency_us", [users()] * 3)
    with pytest.raises(MetricDirectionError, match="declares no direction"):   # a study with both kinds of run
        measure_of("metrics.latency_us", [NETBENCH, users()])
    assert measure_of("metrics.latency_us", [users()], better="higher").better == "higher"


def test_netbenchs_own_runs_get_its_defaults_named_as_such():
    """The control: the same name on netbench's runs is read lower-is-better, as a default."""
    fact = measure_of("metrics.latency_us", [NETBENCH] * 2)
    assert fact.better == "lower" and fact.default == NETBENCH_DEFAULT
    assert measure_of("metrics.busbw_gbps_1048576b", [NETBENCH]).better == "higher"
    with pytest.raises(MetricDirectionError):
        measure_of("metrics.latency_us", [])   # no runs to say what they are


def test_the_header_names_a_default_direction():
    from orchestrator.cli.results_cmd import compare_header

    assert "netbench's default for its own runs, --better to say otherwise" in compare_header(
        "metrics.latency_us", "nodes=1", "lower", NETBENCH_DEFAULT)
    assert "(higher is better)" in compare_header("metrics.latency_us", "nodes=1", "higher")


def test_the_header_says_where_the_interval_is_cautious():
    """What the coverage test allows (``CAUTIOUS_BELOW``) is what compare prints."""
    from orchestrator.cli.results_cmd import compare_header
    from results_db.stats.confidence import CAUTIOUS_BELOW

    assert f"with 3-{CAUTIOUS_BELOW - 1} repeats on a side, heavy-tailed noise makes them cautious (up to 98 %)" \
        in compare_header("throughput", "nodes=1", "higher")


def test_a_figures_axis_reads_the_runs_declaration():
    """The figure of a user's metric says which way is better from the runs' own configs (it read
    the figure's label before, so a declaration never reached it and only netbench's name did)."""
    import pandas as pd

    from results_db.report.figures.data import StudyRuns, metric_by_config

    def study(config) -> StudyRuns:
        runs = pd.DataFrame({"run_id": [1, 2], "nodes": [1, 2], "metrics.latency_us": [5.0, 4.0],
                             "config": [config, config]})
        return StudyRuns("s", runs, ("nodes",))

    assert metric_by_config(study(users("lower")), "metrics.latency_us").attrs["better"] == "lower"
    assert metric_by_config(study(users("higher")), "metrics.latency_us").attrs["better"] == "higher"
    assert "better" not in metric_by_config(study(users()), "metrics.latency_us").attrs   # undeclared: none said
    assert metric_by_config(study(NETBENCH), "metrics.latency_us").attrs["better"] == "lower"
