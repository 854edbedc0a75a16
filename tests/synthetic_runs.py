"""Run folders shaped like what the workload writes, made without MPI, for the tests and the
benchmarks that need many or large ones: ``make_metrics_dir`` (a timeline run, ``timeline=true``:
per rank and step one step record, the forward, backward, wait and update phases,
``events_per_step`` gradient-ready events and one fused allreduce per 20 gradients, as ResNet-50
under a 64 MB threshold fuses 161 gradients into a handful of buffers) and ``template_run``
(one finished run of 5 steps, as the database benchmarks ingest 100,000 of).

The benchmarks import it from here (``sys.path`` gets ``tests/``): a fixture lives with the tests
that read it. ``tests/results_db/test_event_files.py`` ingests what it writes, so a change in the
workload's records that these no longer match fails there.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SPEC = {"study": "bench", "site": "local", "nodes": 1, "workers_per_node": 4, "threads_per_node": 4,
        "batch_size": 32, "epochs": 1}


def make_metrics_dir(root: Path, ranks: int, steps: int, events_per_step: int) -> int:
    """Returns the number of step + event records written."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "spec.json").write_text(json.dumps(SPEC))
    (root / "metrics").mkdir(exist_ok=True)
    rng = random.Random(0)
    for rank in range(ranks):
        with open(root / "metrics" / f"rank-{rank}.jsonl", "w") as fh:
            fh.write(json.dumps({"type": "run_start", "schema": 1, "rank": rank, "size": ranks, "host": "h",
                                 "versions": {"torch": "x"}}) + "\n")
            t = 1.7e9
            for step in range(steps):
                fh.write(json.dumps({"type": "step", "schema": 1, "step": step, "epoch": 0, "samples": 32,
                                     "t_start": t, "data": rng.random() * 1e-3, "forward": rng.random() * 0.05,
                                     "delay": 0.0, "backward": rng.random() * 0.1, "comm_wait": rng.random() * 0.01,
                                     "update": rng.random() * 1e-3, "loss": rng.random()},
                                    separators=(",", ":")) + "\n")
                for phase, a, b in (("forward", 0.0, 0.05), ("backward", 0.05, 0.15), ("wait", 0.15, 0.16),
                                    ("update", 0.16, 0.17)):
                    fh.write(json.dumps({"type": "event", "schema": 1, "step": step, "tensor": "-", "phase": phase,
                                         "t0": t + a, "t1": t + b, "bytes": 0}, separators=(",", ":")) + "\n")
                for e in range(events_per_step):
                    ready = t + 0.05 + e * 1e-3
                    fh.write(json.dumps({"type": "event", "schema": 1, "step": step, "tensor": f"layer{e}.weight",
                                         "phase": "grad_ready", "t0": ready, "t1": ready, "bytes": 4096 * e},
                                        separators=(",", ":")) + "\n")
                    if e % 20 == 19 or e == events_per_step - 1:
                        fh.write(json.dumps({"type": "event", "schema": 1, "step": step, "tensor": f"fused-{e // 20}",
                                             "phase": "allreduce", "t0": ready + 1e-3, "t1": ready + 5e-3,
                                             "bytes": 4096 * 20, "tensors": [f"layer{k}.weight" for k in range(e - 19, e + 1)],
                                             "arrival": ready}, separators=(",", ":")) + "\n")
                t += 0.2
            fh.write(json.dumps({"type": "run_end", "schema": 1, "status": "done"}) + "\n")
    (root / "result.json").write_text(json.dumps({"schema": 1, "status": "done", "steps": steps, "world_size": ranks}))
    per_step = 1 + 4 + events_per_step + -(-events_per_step // 20)
    return ranks * steps * per_step


def template_run(folder: Path, host: str, throughput: float) -> None:
    (folder / "metrics").mkdir(parents=True, exist_ok=True)
    t = 1.7e9
    lines = [{"type": "run_start", "schema": 1, "host": host, "t": t, "versions": {"torch": "2.13.0"}}]
    for step in range(5):
        lines.append({"type": "step", "schema": 1, "step": step, "epoch": 0, "samples": 32, "t_start": t + step,
                      "data": 0.001, "forward": 0.08, "backward": 0.13, "comm_wait": 0.002, "update": 0.002,
                      "delay": 0.0, "loss": 2.0 - step * 0.1, "seconds": 0.215})
    lines.append({"type": "run_end", "schema": 1, "status": "done", "summary": {}})
    (folder / "metrics" / "rank-0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "result.json").write_text(json.dumps({
        "schema": 1, "kind": "builtin", "status": "done", "throughput": throughput, "train_seconds": 1.1,
        "wall_seconds": 3.0, "steps": 5, "final_top1": 0.9, "final_loss": 1.6}))

