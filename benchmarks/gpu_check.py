"""The GPU check: every algorithm a few steps on CUDA, against the CPU path; sync against ddp.

    python benchmarks/gpu_check.py [--steps 10] [--repeats 5] [--out gpu_check.json]
    python benchmarks/gpu_check.py --device cpu     # the same flow on the CPU: checks this script

Run it on a GPU node, in scalestudy's environment with a CUDA build of torch (what it needs is
what a GPU sweep needs; it starts the workload with this environment's mpiexec, as the local
sites do). Three parts, each line saying what it measured:

1. Correctness, 1 rank: sync, ddp (NCCL), eager_solo, eager_majority and horovod (where it was
   built with NCCL) train ``--steps`` steps of small_cnn on digits (batch 32, lr 0.1) on the
   GPU; the loss after those steps is compared with the same run on the CPU, which takes it
   from 2.31 to about 1.0 in 30 steps. Tolerance: the two losses within 10 % of the CPU run's
   drop. The GPU's arithmetic is not the CPU's (cuDNN picks other convolution algorithms and
   uses TF32 by default) and SGD carries such differences forward; a wrong or missing
   gradient would leave the loss near where it started, a whole drop away.
2. Correctness, 2 ranks sharing the one GPU, where the data path allows it: sync through
   pinned host staging (and CUDA-aware MPI, where this MPI is one), eager_solo and
   eager_majority (host staging), async_ps (1 server + 1 worker, host staging). NCCL refuses
   two ranks on one GPU, so sync over torch.distributed and ddp are not run so. Same
   tolerance, except eager-SGD at 2 ranks: which rank's gradient lands in which round depends
   on timing, so two runs differ even on one CPU (eager_majority: 20 % of the drop apart,
   CPU against CPU, ``--device cpu``); its loss is compared within 50 % of the drop, which a
   missing gradient (100 %) still fails.
3. Speed, 1 rank: sync against ddp (NCCL), resnet20 on generated CIFAR-shaped images (batch
   128), interleaved A B A B ``--repeats`` times, median throughput and the ratio with its
   range. At one rank sync has no engine (nothing to reduce) while ddp still runs its reducer
   through NCCL: the ratio is ddp's single-GPU overhead, not a scaling result.

Exit status 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workloads.run_folder import rank_metrics_file, result_file  # noqa: E402
from workloads.spec import RunSpec  # noqa: E402

TOLERANCE = 0.10         # of the CPU run's loss drop over the steps
EAGER_TOLERANCE = 0.50


def _mpiexec() -> str:
    found = shutil.which("mpiexec", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if not found:
        raise SystemExit("gpu_check: no mpiexec in this environment (pip install mpich, or load your MPI)")
    return found


def run(spec: RunSpec, work: Path, name: str, timeout: float = 900) -> dict:
    """One run of the workload, started as a local site starts it; its result and final losses."""
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    spec.save(folder / "spec.json")
    env = {**os.environ, "OMP_NUM_THREADS": str(spec.threads_per_worker)}
    t0 = time.monotonic()
    proc = subprocess.run([_mpiexec(), "-n", str(spec.world_size), sys.executable, "-m", "workloads",
                           str(folder / "spec.json")], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=REPO)
    out = {"name": name, "seconds": time.monotonic() - t0, "returncode": proc.returncode}
    if proc.returncode != 0 or not result_file(folder).is_file():
        out["error"] = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return out
    result = json.loads(result_file(folder).read_text())
    losses = []
    for rank in range(spec.world_size):
        steps = [json.loads(line) for line in rank_metrics_file(folder, rank).read_text().splitlines()
                 if '"type":"step"' in line]
        if steps:
            losses.append((steps[0]["loss"], steps[-1]["loss"]))
    out.update(throughput=result.get("throughput"), data_path_used=result.get("data_path_used"),
               first_loss=statistics.mean(a for a, _ in losses), last_loss=statistics.mean(b for _, b in losses))
    return out


def base(device: str, **fields) -> RunSpec:
    values = dict(study="gpu_check", site="local_gpu" if device == "cuda" else "local", nodes=1, workers_per_node=1,
                  threads_per_node=1, batch_size=32, model="small_cnn", dataset="digits", epochs=1,
                  steps_per_epoch=10, lr=0.1, momentum=0.9, seed=7, device=device,
                  gpu_binding="direct" if device == "cuda" else "none", gpus_per_node=1 if device == "cuda" else 0)
    values.update(fields)
    return RunSpec(**values)


def compare(case: str, gpu: dict, cpu: dict, tolerance: float) -> tuple[bool, str]:
    if "error" in gpu or "error" in cpu:
        return False, f"FAIL {case}: {gpu.get('error') or cpu.get('error')}"
    drop = cpu["first_loss"] - cpu["last_loss"]
    if drop <= 0.1:
        return False, f"FAIL {case}: the CPU run's loss fell by {drop:.3f} only: too few steps to compare (--steps)"
    off = (gpu["last_loss"] - cpu["last_loss"]) / drop
    ok = abs(off) <= tolerance
    return ok, (f"{'ok  ' if ok else 'FAIL'} {case}: loss {gpu['first_loss']:.4f} -> {gpu['last_loss']:.4f} on the "
                f"device, {cpu['first_loss']:.4f} -> {cpu['last_loss']:.4f} on the CPU: {off:+.1%} of the CPU's drop "
                f"(tolerance {tolerance:.0%}); data path {gpu['data_path_used']}")


def correctness(device: str, steps: int, work: Path) -> tuple[list[str], list[dict], bool]:
    import importlib.util

    lines, records, ok_all = [], [], True
    one_rank = ["sync", "ddp", "eager_solo", "eager_majority"]
    if importlib.util.find_spec("horovod") is not None:
        import horovod.torch as hvd

        if device == "cpu" or hvd.nccl_built():
            one_rank.append("horovod")
        else:
            lines.append("skip horovod: this Horovod was built without NCCL (HOROVOD_GPU_OPERATIONS=NCCL)")
    cases = [(f"{a}, 1 rank", dict(algorithm=a), TOLERANCE) for a in one_rank]
    cases += [("sync, 2 ranks on one GPU, host staging", dict(algorithm="sync", data_path="host_staging"), TOLERANCE),
              ("eager_solo, 2 ranks on one GPU", dict(algorithm="eager_solo"), EAGER_TOLERANCE),
              ("eager_majority, 2 ranks on one GPU", dict(algorithm="eager_majority"), EAGER_TOLERANCE),
              ("async_ps, 2 ranks on one GPU (1 server, 1 worker)", dict(algorithm="async_ps"), TOLERANCE)]
    lines.append("skip sync over torch.distributed and ddp at 2 ranks: NCCL refuses two ranks on one GPU")
    lines.append("skip sync over CUDA-aware MPI: the mpich wheel is not CUDA-aware (a Cray MPICH with GTL is)")
    for case, fields, tolerance in cases:
        ranks = 2 if "2 ranks" in case else 1
        fields = {**fields, "workers_per_node": ranks, "threads_per_node": ranks, "steps_per_epoch": steps}
        cpu_fields = {k: v for k, v in fields.items() if k != "data_path"}
        if device == "cpu":   # checking this script: the CPU takes none of the GPU data paths
            fields = cpu_fields
        gpu = run(base(device, **fields), work, f"{case.replace(' ', '_').replace(',', '')}-{device}")
        cpu = run(base("cpu", **cpu_fields), work, f"{case.replace(' ', '_').replace(',', '')}-cpu")
        ok, line = compare(case, gpu, cpu, tolerance)
        ok_all &= ok
        lines.append(line)
        records.append({"case": case, "device": gpu, "cpu": cpu, "ok": ok, "tolerance": tolerance})
    return lines, records, ok_all


def speed(device: str, repeats: int, work: Path) -> tuple[list[str], dict]:
    spec = dict(model="resnet20", dataset="synthetic_images", batch_size=128, steps_per_epoch=30, lr=0.05)
    rows: dict[str, list[float]] = {"sync": [], "ddp": []}
    for i in range(repeats):
        for algorithm in ("sync", "ddp"):   # interleaved: A B A B ...
            r = run(base(device, algorithm=algorithm, **spec), work, f"speed-{algorithm}-{i}")
            if "error" in r:
                return [f"FAIL speed {algorithm}: {r['error']}"], {}
            rows[algorithm].append(r["throughput"])
    ratios = [s / d for s, d in zip(rows["sync"], rows["ddp"])]
    med = {a: statistics.median(v) for a, v in rows.items()}
    line = (f"speed, 1 rank, resnet20 batch 128, {repeats} interleaved pairs of 30 steps: sync {med['sync']:.0f} "
            f"samples/s, ddp (torch.distributed {'nccl' if device == 'cuda' else 'gloo'}) {med['ddp']:.0f} samples/s; "
            f"sync/ddp median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); at one "
            "rank sync reduces nothing and ddp still runs its reducer: ddp's single-GPU overhead")
    return [line], {"throughput": rows, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="also write every number as JSON here")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: no GPU is visible (torch {torch.__version__}, CUDA {torch.version.cuda})", file=sys.stderr)
        return 2
    header = f"gpu_check on {torch.cuda.get_device_name(0) if args.device == 'cuda' else 'CPU'}; torch " \
             f"{torch.__version__}, CUDA {torch.version.cuda}"
    print(header, flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        lines, records, ok = correctness(args.device, args.steps, Path(tmp))
        for line in lines:
            print(line, flush=True)
        speed_record = {}
        if not args.skip_speed:
            speed_lines, speed_record = speed(args.device, args.repeats, Path(tmp))
            for line in speed_lines:
                print(line, flush=True)
            ok &= bool(speed_record)
    if args.out:
        args.out.write_text(json.dumps({"header": header, "correctness": records, "speed": speed_record}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
