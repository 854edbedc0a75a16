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


def make_metrics_streams(root: Path, ranks: int, steps: int, events_per_step: int, batch: int = 16384) -> int:
    """The same run as ``make_metrics_dir`` (the same events, step records and times, to the
    tensor names), its events as each rank's binary stream (``workloads.event_log``) as a
    ``timeline=true`` rank now writes them, the .jsonl holding the other records. Built with numpy
    a step pattern at a time (44.8 M events in a minute, where a Python loop takes ten). Returns
    the number of step + event records."""
    import numpy as np
    import pyarrow as pa

    from workloads.event_log import stream_schema, write_stream

    root.mkdir(parents=True, exist_ok=True)
    (root / "spec.json").write_text(json.dumps(SPEC))
    (root / "metrics").mkdir(exist_ok=True)
    # one step's events: the 4 phases, then each gradient and its fused allreduce; times computed
    # in make_metrics_dir's order of operations, so that both fixtures hold the very same floats
    names, phases, kind, a, b, offset, nbytes, members = [], [], [], [], [], [], [], []
    for phase, x, y in (("forward", 0.0, 0.05), ("backward", 0.05, 0.15), ("wait", 0.15, 0.16), ("update", 0.16, 0.17)):
        names.append("-"); phases.append(phase); kind.append(0); a.append(x); b.append(y); offset.append(0.0)
        nbytes.append(0); members.append(None)
    for e in range(events_per_step):
        names.append(f"layer{e}.weight"); phases.append("grad_ready"); kind.append(1); a.append(0.0); b.append(0.0)
        offset.append(e * 1e-3); nbytes.append(4096 * e); members.append(None)
        if e % 20 == 19 or e == events_per_step - 1:
            names.append(f"fused-{e // 20}"); phases.append("allreduce"); kind.append(2); a.append(0.0); b.append(0.0)
            offset.append(e * 1e-3); nbytes.append(4096 * 20)
            members.append(",".join(f"layer{k}.weight" for k in range(e - 19, e + 1)))
    per = len(names)
    dictionary = {key: pa.array(values, pa.string()).dictionary_encode() for key, values in
                  (("tensor", names), ("phase", phases), ("tensors", members))}
    codes = {key: (np.nan_to_num(d.indices.to_numpy(zero_copy_only=False)).astype(np.int32),
                   np.asarray(d.indices.is_null().to_numpy(zero_copy_only=False))) for key, d in dictionary.items()}
    kind, a, b, offset, nbytes = (np.array(v) for v in (kind, a, b, offset, nbytes))
    starts, t = [], 1.7e9
    for _ in range(steps):   # accumulated as make_metrics_dir does
        starts.append(t)
        t += 0.2
    starts = np.array(starts)
    rng = random.Random(0)
    for rank in range(ranks):
        with open(root / "metrics" / f"rank-{rank}.jsonl", "w") as fh:
            fh.write(json.dumps({"type": "run_start", "schema": 1, "rank": rank, "size": ranks, "host": "h",
                                 "versions": {"torch": "x"}}) + "\n")
            for step in range(steps):
                fh.write(json.dumps({"type": "step", "schema": 1, "step": step, "epoch": 0, "samples": 32,
                                     "t_start": float(starts[step]), "data": rng.random() * 1e-3,
                                     "forward": rng.random() * 0.05, "delay": 0.0, "backward": rng.random() * 0.1,
                                     "comm_wait": rng.random() * 0.01, "update": rng.random() * 1e-3,
                                     "loss": rng.random()}, separators=(",", ":")) + "\n")
            fh.write(json.dumps({"type": "run_end", "schema": 1, "status": "done"}) + "\n")

        def batches():
            per_batch = max(batch // per, 1)   # whole steps a batch, as a rank hands them over
            for first in range(0, steps, per_batch):
                k = min(per_batch, steps - first)
                t = np.repeat(starts[first:first + k], per)
                code = lambda key: pa.DictionaryArray.from_arrays(  # noqa: E731
                    pa.array(np.tile(codes[key][0], k), pa.int32(), mask=np.tile(codes[key][1], k)),
                    dictionary[key].dictionary)
                kinds = np.tile(kind, k)
                ready = (t + 0.05) + np.tile(offset, k)
                t0 = np.where(kinds == 0, t + np.tile(a, k), np.where(kinds == 1, ready, ready + 1e-3))
                t1 = np.where(kinds == 0, t + np.tile(b, k), np.where(kinds == 1, ready, ready + 5e-3))
                yield pa.RecordBatch.from_arrays(
                    [pa.array(np.repeat(np.arange(first, first + k, dtype=np.int32), per)), code("tensor"),
                     code("phase"), pa.array(t0), pa.array(t1), pa.array(np.tile(nbytes, k).astype(np.int64)),
                     code("tensors"), pa.array(ready, mask=kinds != 2)], schema=stream_schema())
        write_stream(root / "metrics" / f"events-rank-{rank}.arrows", batches())
    (root / "result.json").write_text(json.dumps({"schema": 1, "status": "done", "steps": steps, "world_size": ranks}))
    return ranks * steps * (1 + per)


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

