"""Pool the per-round lines of several ``bench_weak_scaling.py`` runs (their printed output).

    python benchmarks/bench_weak_scaling.py --repeats 9 | tee a.log   # and again: b.log
    python benchmarks/pool_rounds.py a.log b.log

Each round ran every variant within minutes of the limit, so each round gives one ratio per
variant (variant / limit) and per pair (sync / peer); pooling rounds of runs made on the same
commit gives more of them than one run can afford. Printed per ratio: the median over rounds,
a 95 % interval of that median (10,000 bootstrap resamples of the rounds, seed 0 for each
ratio, so an interval does not depend on which other ratios were printed), how many
rounds were above 1, and the min–max. An interval that contains 1 (or 0.9 for a goal of 0.9)
does not show the comparison either way.
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from bench_weak_scaling import AUTOTUNED, IN_HOOKS, NO_OVERLAP, VARIANTS

ROUND = re.compile(r"^\s*round \d+/\d+: (.*)$")
# the names the benchmark prints, longest first ("sync, autotuned" before "sync")
NAMES = sorted(["limit", *VARIANTS.values()], key=len, reverse=True)
VALUE = re.compile("(" + "|".join(map(re.escape, NAMES)) + r")=([\d.]+)")
OURS = ("sync", AUTOTUNED, NO_OVERLAP, IN_HOOKS)
PEERS = ("ddp", "horovod")


def rounds_of(paths: list[str]) -> list[dict[str, float]]:
    rounds = []
    for path in paths:
        with open(path) as f:
            for line in f:
                m = ROUND.match(line)
                if m:
                    rounds.append({k: float(v) for k, v in VALUE.findall(m.group(1))})
    return rounds


def summary(xs: list[float]) -> str:
    a = np.asarray(xs)
    rng = np.random.default_rng(0)
    medians = np.median(rng.choice(a, size=(10_000, len(a))), axis=1)
    lo, hi = np.quantile(medians, [0.025, 0.975])
    return (f"{np.median(a):.3f} (95 % interval of the median {lo:.3f}-{hi:.3f}; > 1 in {int((a > 1).sum())} "
            f"of {len(a)} rounds; min-max {a.min():.3f}-{a.max():.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()
    rounds = rounds_of(args.logs)
    if not rounds:
        ap.error("no 'round k/n:' lines in " + ", ".join(args.logs))
    names = [n for n in (*OURS, *PEERS) if all(n in r for r in rounds)]
    print(f"{len(rounds)} rounds from {len(args.logs)} run(s)")
    for n in names:
        print(f"{n} / limit = " + summary([r[n] / r["limit"] for r in rounds]))
    for ours in [n for n in names if n in OURS]:
        for peer in [n for n in names if n in PEERS]:
            print(f"{ours} / {peer} = " + summary([r[ours] / r[peer] for r in rounds]))
    reference = NO_OVERLAP    # what overlap costs or wins: each sync variant against no overlap
    for ours in [n for n in names if n in OURS and n != reference and reference in names]:
        print(f"{ours} / {reference} = " + summary([r[ours] / r[reference] for r in rounds]))


if __name__ == "__main__":
    main()
