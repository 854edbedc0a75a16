"""The GPU check: the data paths GPU runs take, at several ranks, against an independent reference.

    python -m orchestrator.gpu_check [--steps 10] [--repeats 5] [--out gpu_check.json]
    python -m orchestrator.gpu_check --device cpu     # the same flow on the CPU: checks this script only
    python -m orchestrator.gpu_check --system-mpi [--launcher srun]   # Polaris [Perlmutter], in a job

Run it on a GPU node, in scalestudy's environment with a CUDA build of torch; it starts each case
with this environment's mpiexec, as the local sites do. Every line says what it compared; exit
status 1 if any check fails, 2 if no GPU is visible. Four parts:

1. Agreement at several ranks. Each case trains small_cnn on digits for ``--steps`` steps at R
   ranks with a fusion threshold of 0.02 MB (several fused groups per engine cycle, the case in
   which a rank could issue its groups' collectives in another order than its peers), and is
   compared with one process training the global batch (R x 16) on the same device: the weights'
   distance ``|w_R - w_1| / |w_1 - w_init|`` (how far from the reference, relative to how far
   training moved) must be below ``AGREEMENT[device]``. A sum that misses a rank, or adds the
   wrong tensors, moves the weights a sizeable part of a step off; cuDNN's and TF32's arithmetic
   on another batch split moves them far less (each line prints the measured value). Cases:
   ``sync``'s default GPU path (the engine over NCCL through torch.distributed) and ``ddp`` on R
   separate GPUs where the node has several; ``sync`` through CUDA-aware MPI where this MPI is
   one; two ranks sharing one GPU through pinned host staging; eager_solo and eager_majority
   with every round synchronous (then they are SGD on the global batch) through host staging.
2. The negative control: the first agreement case again with rank 1's contribution zeroed before
   every sum (orchestrator/gpu_check/rank.py --corrupt). The ranks still agree with one another;
   the check must report it as failed, or the whole check fails: a pass then means something.
3. Every algorithm's loss on the device against the same run on the CPU, 1 rank (and async_ps,
   1 server + 1 worker): within 10 % of the CPU run's loss drop (eager-SGD at 2 ranks: 50 %, its
   rounds depend on timing).
4. Speed: sync against ddp, resnet20 on generated CIFAR-shaped images (batch 128), on R GPUs
   where the node has several (1 otherwise: there sync reduces nothing and the ratio is ddp's
   single-GPU overhead), interleaved A B A B ``--repeats`` times, medians and the ratio's range.
5. (after part 1) eager-SGD's catch-up through host staging: a straggler's skipped rounds, each
   missed result applied through the one pinned buffer, the models identical (``catch_up``).

With ``--device cpu`` the same flow runs on CPU paths (host MPI in place of host staging and
CUDA-aware MPI, gloo in place of NCCL): it checks the script and its negative control, not a GPU.
"""


from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from workloads.run_folder import rank_metrics_file

from .launch import LAUNCH, base, case_environment, cuda_aware_mpi, run, weights  # noqa: F401 - the check's parts, by name

TOLERANCE = 0.10         # of the CPU run's loss drop over the steps
EAGER_TOLERANCE = 0.50
# |w_R - w_1| / |w_1 - w_init| below which R ranks agree with one process on the global batch.
# CPU: the same arithmetic on another batch split, about 1e-6 (tests/orchestrator/test_gpu_check.py). CUDA:
# cuDNN picks other algorithms for other batch sizes and convolutions run in TF32 by default
# (10-bit mantissa): differences of order 1e-3 of a step; a sum that misses one of two ranks is
# of order 0.5 (the control prints its value).
AGREEMENT = {"cpu": 1e-4, "cuda": 0.05}
FUSION_MB = 0.02         # small_cnn's gradients in several fused groups per cycle


def distance(case: dict, reference: dict) -> tuple[float, float]:
    """How far the case's ranks are from the reference, and from one another, relative to how
    far the reference moved from the initial weights."""
    import numpy as np

    ref = reference["final"][0]
    moved = float(np.linalg.norm(ref - reference["init"]))
    off = max(float(np.linalg.norm(w - ref)) for w in case["final"]) / moved
    spread = max(float(np.linalg.norm(w - case["final"][0])) for w in case["final"]) / moved
    return off, spread


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


def agreement_cases(device: str, gpus: int, work: Path | None = None) -> tuple[list[tuple[str, dict, int]], list[str]]:
    """(case, spec fields, ranks) for part 1, and lines for what was left out and why."""
    cases, skipped = [], []
    ranks = min(gpus, 4) if device == "cuda" else 2
    common = dict(algorithm="sync", fusion_threshold_mb=FUSION_MB, timeline=True)
    if device == "cpu" or gpus >= 2:
        on = f"{ranks} ranks on {ranks} GPUs" if device == "cuda" else f"{ranks} ranks"
        cases.append((f"sync, {on}, torch.distributed ({'NCCL' if device == 'cuda' else 'gloo'})",
                      dict(common, data_path="torch_distributed", gpus_per_node=ranks if device == "cuda" else 0),
                      ranks))
        cases.append((f"ddp, {on} ({'NCCL' if device == 'cuda' else 'gloo'})",
                      dict(common, algorithm="ddp", gpus_per_node=ranks if device == "cuda" else 0), ranks))
    else:
        skipped.append("skip sync over NCCL and ddp at several ranks: this node has one GPU and NCCL refuses "
                       "two ranks on one GPU")
    if device == "cuda":
        aware, why = cuda_aware_mpi(work) if work is not None else (False, "not asked")
        if aware:
            n = ranks if gpus >= 2 else 2
            cases.append((f"sync, {n} ranks, CUDA-aware MPI", dict(common, data_path="cuda_aware_mpi",
                                                                    gpus_per_node=min(gpus, n)), n))
        else:
            skipped.append(f"skip sync over CUDA-aware MPI: {why}")
    staged = "host staging" if device == "cuda" else "host MPI in place of host staging"
    path = "host_staging" if device == "cuda" else "mpi"
    cases.append((f"sync, 2 ranks sharing one GPU, {staged}", dict(common, data_path=path, gpus_per_node=1 if
                                                                   device == "cuda" else 0), 2))
    for algorithm in ("eager_solo", "eager_majority"):
        cases.append((f"{algorithm}, 2 ranks sharing one GPU, every round synchronous, {staged}",
                      dict(algorithm=algorithm, sync_every=1, gpus_per_node=1 if device == "cuda" else 0), 2))
    return cases, skipped


def catch_up(device: str, steps: int, work: Path) -> tuple[list[str], list[dict], bool]:
    """eager_solo with a straggler (fixed, 20 ms a step) and catch-up ``apply_all``, 2 ranks sharing
    one GPU through host staging, re-synchronised only at the last step: the rank that skips rounds
    applies each missed result through the one pinned buffer, one after another (the copy of one
    must have read the buffer before the next is written: ``HostMirror.fill``), so the models must
    be identical before that last averaging (drift 0), and the straggler must have skipped."""
    path = "host_staging" if device == "cuda" else "mpi"
    spec = base(device, workers_per_node=2, threads_per_node=2, batch_size=16, steps_per_epoch=steps,
                algorithm="eager_solo", eager_catch_up="apply_all", resync_epochs=0, data_path=path,
                imbalance_kind="fixed", imbalance_delay_ms=20.0, gpus_per_node=1 if device == "cuda" else 0)
    got = run(spec, work, "catch-up")
    case = f"eager_solo catch-up (apply_all), 2 ranks, a 20 ms straggler, {path}"
    if "error" in got:
        return [f"FAIL {case}: {got['error']}"], [], False
    folder = work / "catch-up"
    records = [json.loads(line) for r in range(2) for line in rank_metrics_file(folder, r).read_text().splitlines()
               if '"type":"contribution"' in line or '"type":"step"' in line]
    drift = max((r.get("drift") or 0.0) for r in records if r["type"] == "contribution")
    computed = sum(r["type"] == "step" for r in records)
    skipped = 2 * steps - computed
    ok = drift == 0.0 and skipped > 0
    line = (f"{'ok  ' if ok else 'FAIL'} {case}: drift before the last averaging {drift:.2e} (must be 0), "
            f"{skipped} of {2 * steps} rank-steps skipped (must be > 0)")
    return [line], [{"case": case, "drift": drift, "skipped": skipped, "ok": ok}], ok


def agreement(device: str, gpus: int, steps: int, work: Path) -> tuple[list[str], list[dict], bool]:
    lines, records, ok_all = [], [], True
    cases, skipped = agreement_cases(device, gpus, work)
    lines += skipped
    references: dict[int, dict] = {}
    tolerance = AGREEMENT[device]
    for i, (case, fields, ranks) in enumerate(cases):
        if ranks not in references:
            references[ranks] = weights(base(device, steps_per_epoch=steps, batch_size=16 * ranks), work,
                                        f"reference-{ranks}")
        reference = references[ranks]
        spec = base(device, workers_per_node=ranks, threads_per_node=ranks, batch_size=16, steps_per_epoch=steps,
                    **fields)
        got = weights(spec, work, f"agree-{i}")
        if "error" in reference or "error" in got:
            ok_all = False
            lines.append(f"FAIL {case}: {reference.get('error') or got.get('error')}")
            continue
        off, spread = distance(got, reference)
        several = fields.get("algorithm") != "sync" or got["groups_per_step"] >= 2
        ok = off <= tolerance and several
        ok_all &= ok
        lines.append(f"{'ok  ' if ok else 'FAIL'} {case}: weights {off:.2e} of the training's move from one process "
                     f"on the global batch (tolerance {tolerance:.0e}), ranks {spread:.1e} apart; data path "
                     f"{got['data_path_used']}" + (f"; {got['groups_per_step']:g} fused groups a step" if
                                                   fields.get("algorithm") == "sync" else "")
                     + ("" if several else " (fewer than 2 groups a step: the order was not exercised)"))
        records.append({"case": case, "off": off, "spread": spread, "ok": ok, "groups_per_step": got["groups_per_step"],
                        "data_path_used": got["data_path_used"]})
        if i == 0:   # the negative control, on the first case's path
            bad = weights(spec, work, "control", corrupt=True)
            if "error" in bad:
                ok_all = False
                lines.append(f"FAIL negative control: {bad['error']}")
                continue
            bad_off, bad_spread = distance(bad, reference)
            caught = bad_off > tolerance
            ok_all &= caught
            lines.append(f"{'ok  ' if caught else 'FAIL'} negative control ({case}, rank 1's contribution zeroed "
                         f"before every sum): weights {bad_off:.2e} off, ranks {bad_spread:.1e} apart: "
                         + ("caught" if caught else "NOT caught: this check cannot see a wrong sum"))
            records.append({"case": "negative control", "off": bad_off, "spread": bad_spread, "ok": caught})
    return lines, records, ok_all


def losses(device: str, steps: int, work: Path) -> tuple[list[str], list[dict], bool]:
    import importlib.util

    lines, records, ok_all = [], [], True
    one_rank = ["sync", "ddp", "eager_solo", "eager_majority"]
    if importlib.util.find_spec("horovod") is not None:
        import horovod.torch as hvd

        if device == "cpu" or hvd.nccl_built():
            one_rank.append("horovod")
        else:
            lines.append("skip horovod: this Horovod was built without NCCL (HOROVOD_GPU_OPERATIONS=NCCL)")
    cases = [(f"{a}, 1 rank", dict(algorithm=a), TOLERANCE, 1) for a in one_rank]
    cases.append(("async_ps, 2 ranks on one GPU (1 server, 1 worker)", dict(algorithm="async_ps"), TOLERANCE, 2))
    for case, fields, tolerance, ranks in cases:
        fields = {**fields, "workers_per_node": ranks, "threads_per_node": ranks, "steps_per_epoch": steps}
        name = case.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
        gpu = run(base(device, **fields), work, f"{name}-{device}")
        cpu = run(base("cpu", **fields), work, f"{name}-cpu")
        ok, line = compare(case, gpu, cpu, tolerance)
        ok_all &= ok
        lines.append(line)
        records.append({"case": case, "device": gpu, "cpu": cpu, "ok": ok, "tolerance": tolerance})
    return lines, records, ok_all


def speed(device: str, gpus: int, repeats: int, work: Path) -> tuple[list[str], dict]:
    ranks = min(gpus, 4) if device == "cuda" and gpus >= 2 else 1
    spec = dict(model="resnet20", dataset="synthetic_images", batch_size=128, steps_per_epoch=30, lr=0.05,
                workers_per_node=ranks, threads_per_node=ranks, gpus_per_node=ranks if device == "cuda" else 0)
    rows: dict[str, list[float]] = {"sync": [], "ddp": []}
    for i in range(repeats):
        for algorithm in ("sync", "ddp"):   # interleaved: A B A B ...
            r = run(base(device, algorithm=algorithm, **spec), work, f"speed-{algorithm}-{i}")
            if "error" in r:
                return [f"FAIL speed {algorithm}: {r['error']}"], {}
            rows[algorithm].append(r["throughput"])
    ratios = [s / d for s, d in zip(rows["sync"], rows["ddp"])]
    med = {a: statistics.median(v) for a, v in rows.items()}
    where = f"{ranks} ranks on {ranks} GPUs" if ranks > 1 else "1 rank"
    line = (f"speed, {where}, resnet20 batch 128, {repeats} interleaved pairs of 30 steps: sync {med['sync']:.0f} "
            f"samples/s, ddp (torch.distributed {'nccl' if device == 'cuda' else 'gloo'}) {med['ddp']:.0f} samples/s; "
            f"sync/ddp median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})"
            + ("; at one rank sync reduces nothing and ddp still runs its reducer: ddp's single-GPU overhead"
               if ranks == 1 else ""))
    return [line], {"ranks": ranks, "throughput": rows, "ratios": ratios}


def header(device: str) -> str:
    import torch

    if device == "cpu":
        return f"gpu_check --device cpu (checks the check, not a GPU); torch {torch.__version__}"
    props = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "?"
    driver = "?"
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.split()[0]
    except Exception:
        pass
    from mpi4py import MPI

    return (f"gpu_check on {len(props)} x {props[0]}; driver {driver}; torch {torch.__version__}, CUDA "
            f"{torch.version.cuda}, NCCL {nccl}; {MPI.Get_library_version().splitlines()[0].strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-losses", action="store_true", help="leave out part 3 (every algorithm against the CPU)")
    parser.add_argument("--out", type=Path, default=None, help="also write every number as JSON here")
    parser.add_argument("--launcher", choices=("mpiexec", "srun"), default="mpiexec",
                        help="how to start each case's ranks: this environment's mpiexec (Polaris: PALS' mpiexec "
                             "once the modules are loaded), or srun (Perlmutter)")
    parser.add_argument("--system-mpi", action="store_true",
                        help="the MPI is the machine's (Cray MPICH): set MPICH_GPU_SUPPORT_ENABLED per data path as a "
                             "sweep's runs do (Polaris, Perlmutter)")
    args = parser.parse_args(argv)
    LAUNCH.update(launcher=args.launcher, system_mpi=args.system_mpi)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: no GPU is visible (torch {torch.__version__}, CUDA {torch.version.cuda})", file=sys.stderr)
        return 2
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    top = header(args.device)
    print(top, flush=True)
    record: dict = {"header": top}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        lines, record["agreement"], ok = agreement(args.device, gpus, args.steps, work)
        catch_lines, record["catch_up"], ok_catch = catch_up(args.device, args.steps, work)
        ok &= ok_catch
        for line in lines + catch_lines:
            print(line, flush=True)
        if not args.skip_losses:
            lines, record["losses"], ok_losses = losses(args.device, args.steps, work)
            ok &= ok_losses
            for line in lines:
                print(line, flush=True)
        if not args.skip_speed:
            speed_lines, record["speed"] = speed(args.device, gpus, args.repeats, work)
            for line in speed_lines:
                print(line, flush=True)
            ok &= bool(record["speed"])
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))
    print("gpu_check: " + ("every check passed" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
