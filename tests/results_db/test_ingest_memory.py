"""Ingestion memory stays flat: four times the metrics do not take (much) more memory."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, env_with_bin

from synthetic_runs import make_metrics_dir

PROGRAM = str(REPO / "tests" / "db_programs" / "ingest_rss.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple]:
    """Two runs of 2 ranks, one four times the other's steps. Both are past the first few 4 MiB
    blocks of a rank, over which the allocators' caches (pyarrow's, each thread's) fill: measured
    here 1,500 against 6,000 steps grew +30..+40 MiB, 3,000 against 12,000 +3..+26."""
    base = tmp_path_factory.mktemp("ingest-memory")
    made = {}
    for name, steps in (("small", 3000), ("big", 12000)):
        make_metrics_dir(base / name, ranks=2, steps=steps, events_per_step=40)
        made[name] = (base / name, sum(p.stat().st_size for p in (base / name / "metrics").iterdir()))
    return made


def _peak_rss(run_dir, *layout: int, repeats: int = 1) -> float:
    """Peak RSS growth of ingesting ``run_dir`` in a fresh process, the least of ``repeats``: a
    peak is noisy upwards (when the threads' allocations meet), the least is what it needs."""
    growths = []
    for i in range(repeats):
        db = run_dir.parent / f"{run_dir.name}-{'-'.join(map(str, layout))}-{i}.db"
        out = subprocess.run([sys.executable, PROGRAM, str(run_dir), f"sqlite:///{db}", *map(str, layout)],
                             capture_output=True, text=True, env=env_with_bin(), timeout=600)
        assert out.returncode == 0, out.stderr
        before, peak, _ = (float(x) for x in out.stdout.split())
        growths.append(peak - before)
    return min(growths)


@pytest.mark.sweep
def test_memory_does_not_grow_with_the_metrics(runs):
    (small_dir, small_size), (big_dir, big_size) = runs["small"], runs["big"]
    assert big_size > 3.5 * small_size and big_size > 160 * 2**20
    small_growth, big_growth = _peak_rss(small_dir, repeats=2), _peak_rss(big_dir, repeats=2)
    # streaming in bounded batches: 4x the data, well under 4x (or even +30 MiB) the memory
    assert big_growth < small_growth + 30, (small_growth, big_growth, small_size, big_size)


@pytest.mark.sweep
def test_the_event_files_writer_holds_a_bounded_part_of_its_footer(runs):
    """A Parquet writer keeps each row group's metadata (~8 KB here) until it closes: a 256-rank,
    1,000-step run of ResNet-50 (9,000 groups) added 140 MiB that way. Parts of a bounded number
    of groups keep it flat; the control (one part) grows with the run."""
    small_dir, big_dir = runs["small"][0], runs["big"][0]
    small_parts, big_parts = _peak_rss(small_dir, 50, 50, repeats=2), _peak_rss(big_dir, 50, 50, repeats=2)
    small_one, big_one = _peak_rss(small_dir, 50, 10**9), _peak_rss(big_dir, 50, 10**9)   # 19,200 groups of 50
    assert big_one > small_one + 60, (small_one, big_one)   # the control: the check can fail
    assert big_parts < small_parts + 30, (small_parts, big_parts, small_one, big_one)
