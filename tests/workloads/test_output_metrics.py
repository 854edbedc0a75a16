"""Metrics from program output, and which rank a failed command is blamed on: checked by hand."""

from __future__ import annotations

import re

import pytest

from workloads.command import first_failure
from workloads.output_metrics import MetricPattern, extract


def _outputs(tmp_path, texts: dict[int, str]):
    paths = {}
    for rank, text in texts.items():
        paths[rank] = tmp_path / f"rank-{rank}.log"
        paths[rank].write_text(text)
    return paths


def test_reductions_over_matches_and_ranks(tmp_path):
    outputs = _outputs(tmp_path, {0: "rate 1\nrate 3\nrate nan\n", 1: "rate 5\nrate 7\n", 2: "rate inf\nrate 2\n"})
    spec = lambda **kw: {"pattern": r"rate (\S+)", **kw}  # noqa: E731
    found, missing = extract({"last0": spec(), "first_all_sum": spec(reduce="first", ranks="all", ranks_reduce="sum"),
                              "mean_all_max": spec(reduce="mean", ranks="all", ranks_reduce="max"),
                              "max_all_min": spec(reduce="max", ranks="all", ranks_reduce="min")}, outputs)
    assert missing == []
    assert found == {"last0": 3.0,                 # nan is skipped, not taken as the last value
                     "first_all_sum": 1 + 5 + 2,   # inf is skipped too
                     "mean_all_max": 6.0, "max_all_min": 2.0}


def test_every_rank_must_match_when_ranks_is_all(tmp_path):
    outputs = _outputs(tmp_path, {0: "rate 1\n", 1: "nothing\n", 2: "rate 2\n", 3: ""})
    found, missing = extract({"r": {"pattern": r"rate (\d+)", "ranks": "all", "ranks_reduce": "sum"},
                              "opt": {"pattern": r"rate (\d+)", "ranks": "all", "required": False}}, outputs)
    assert found == {} and missing == [r"metric 'r': pattern 'rate (\d+)' never matched in the output of ranks 1, 3"]


@pytest.mark.parametrize("spec, words", [
    ({"pattern": "(["}, "not a valid regular expression"),
    ({"pattern": "a (b) (c)"}, "has 2 groups"),
    ({"pattern": "(x)", "ranks": "1"}, "expected 0 (rank 0's output) or all"),
    ({"pattern": "(x)", "ranks_reduce": "median"}, "ranks_reduce='median'"),
    ({"pattern": "(x)", "colour": "red"}, "unknown key 'colour'"),
])
def test_bad_metric_specs(spec, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        MetricPattern.from_dict("m", spec)


def test_the_first_rank_to_fail_by_itself_is_blamed():
    # rank 1 exits with 3 at t=10; rank 0 loses its peer at t=11 (exit 1); rank 2 is killed at t=12 (137)
    assert first_failure({0: (1, 11.0), 1: (3, 10.0), 2: (137, 12.0), 3: (0, 9.0)}) == 1
    # only signal deaths: the earliest
    assert first_failure({0: (143, 5.0), 1: (137, 4.0)}) == 1
    assert first_failure({0: (0, 1.0), 1: (0, 1.0)}) is None
