"""Fit Extra-P on a file ``scalestudy model export --format extrap`` wrote, and print its
models and their values at other rank counts as JSON (one object on stdout).

Runs in Extra-P's own environment (Extra-P 4.2.5 pins ``numpy~=1.18``, i.e. numpy 1.x,
while scalestudy's torch wants 2.x): ``scripts/install-extrap.sh`` makes ``.venv-extrap``.

    .venv-extrap/bin/python benchmarks/extrap_fit.py FILE.jsonl --at 16,32 [--measure mean|median]

Extra-P's default modeller (the performance model normal form, one term, searched over its
hypotheses with leave-one-out cross-validation) on each callpath; the value is the model
evaluated at ``p``.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--at", required=True, help="rank counts to evaluate the models at, e.g. 16,32")
    ap.add_argument("--measure", choices=("mean", "median"), default="mean",
                    help="what Extra-P fits on among a point's repetitions (default mean, like our fit)")
    args = ap.parse_args()
    from extrap.entities.measurement import Measure
    from extrap.fileio.file_reader.jsonlines_file_reader import read_jsonlines_file
    from extrap.modelers.model_generator import ModelGenerator

    experiment = read_jsonlines_file(args.file)
    if [p.name for p in experiment.parameters] != ["p"]:
        print(f"{args.file}: parameters {[p.name for p in experiment.parameters]}: this script evaluates "
              "one-parameter (p) models only", file=sys.stderr)
        return 2
    generator = ModelGenerator(experiment, use_measure=Measure.from_str(args.measure))
    generator.model_all()
    at = [int(x) for x in args.at.split(",")]
    out = {}
    for (callpath, metric), model in generator.models.items():
        function = model.hypothesis.function
        out[callpath.name] = {"function": function.to_string(*experiment.parameters),
                              "rss": float(model.hypothesis.RSS), "smape": float(model.hypothesis.SMAPE),
                              "at": {str(p): float(function.evaluate(p)) for p in at}}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
