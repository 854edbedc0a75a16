"""The data-parallel training loop and its measurements.

Each step is timed in phases (data, forward, backward, comm_wait, update) on a clock
aligned to rank 0, so that per-rank step records can be compared across nodes.
Throughput counts global samples over the slowest rank's training time: in
synchronous training the slowest rank is the speed of the job.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

import mpi4py
import numpy as np
import torch
from mpi4py import MPI

from . import objective
from .algorithms import SyncOptions, build_gradient_sync
from .clock import AlignedClock, estimate_offset_to_root
from .comm.arrival import all_arrived
from .data import Dataset, GlobalBatchSampler, load_dataset
from .device import StepClock, UtilizationSampler, gpu_facts, peak_memory_bytes, run_device
from .energy import start_host_energy
from .evaluation import ShardedEvaluation, evaluate
from .imbalance import DelayInjector
from .cpu_grant import cpu_record
from .hardware import host_hardware
from .flops import FlopCount, count_training_flops, mfu, rank_peak, total_peak
from .metrics import MetricsWriter, write_result
from .failure import SetupError
from .models import build_model
from .nccl_network import network_facts
from .outcome import TrainOutcome, make_outcome, record_step
from .registry import EAGER_ALGORITHMS, resolve_data_path
from .run_folder import STEP_PHASES
from .spec import RunSpec


def configure_threads(spec: RunSpec) -> int:
    """Give each rank its share of the node's threads (threads_per_node / workers_per_node)."""
    threads = spec.threads_per_worker
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    return threads


def node_name() -> str:
    """The node this rank runs on as the scheduler names it (virtual nodes share a hostname)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def scheduler_job_id() -> str | None:
    for var in ("SLURM_JOB_ID", "PBS_JOBID", "COBALT_JOBID"):
        if os.environ.get(var):
            step = os.environ.get("SLURM_STEP_ID") if var == "SLURM_JOB_ID" else None
            return f"{os.environ[var]}.{step}" if step else os.environ[var]
    return None


def library_versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "mpi4py": mpi4py.__version__,
        "mpi_library": " ".join(MPI.Get_library_version().splitlines()[0].split()),
        "numpy": np.__version__,
    }


def train(spec: RunSpec, run_dir: str | Path, comm: MPI.Comm = MPI.COMM_WORLD) -> TrainOutcome:
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != spec.world_size:
        raise RuntimeError(
            f"MPI world size is {size} but the spec asks for nodes={spec.nodes} x workers_per_node="
            f"{spec.workers_per_node} = {spec.world_size} ranks (is the launcher starting one MPI job?)"
        )
    configure_threads(spec)
    device = run_device(spec.device, rank % spec.workers_per_node, rank)   # before any collective
    all_arrived(comm)   # the ranks still importing keep the cores (workloads/comm/arrival.py)
    clock = AlignedClock(estimate_offset_to_root(comm))
    writer = MetricsWriter(run_dir, rank, events=spec.timeline)
    gpu = gpu_facts(device)
    versions = {**library_versions(), "host": host_hardware()}   # what the artifact's hardware says
    if gpu is not None:
        versions.update({k: gpu[k] for k in ("cuda", "nccl", "driver")})
    placement = {"host": socket.gethostname(), "threads": torch.get_num_threads(), **cpu_record(), "gpu": gpu}
    writer.run_start(
        spec=spec.to_dict(), rank=rank, size=size, pid=os.getpid(), node=node_name(), job_id=scheduler_job_id(),
        clock_offset=clock.offset, t=clock.now(), versions=versions, **placement,
    )
    energy = None
    try:
        try:   # the host's first rank reads its energy counters (workloads/energy.py)
            energy = start_host_energy(comm, spec.device)
        except ValueError as exc:   # SCALESTUDY_ENERGY names no source: the site's configuration
            raise SetupError(str(exc)) from exc
        outcome = _train_loop(spec, comm, clock, writer, Path(run_dir), device, placement)
    except BaseException as exc:
        if energy is not None:
            energy.stop()
        writer.run_end(status="failed", error=f"{type(exc).__name__}: {exc}", t=clock.now())
        writer.close()
        raise
    reading = energy.stop() if energy is not None else None
    summary = {**outcome.summary["rank_summary"], **({"energy": reading.to_dict()} if reading else {})}
    writer.run_end(status="done", t=clock.now(), summary=summary)
    writer.close()
    all_arrived(comm)
    if rank == 0:
        write_result(run_dir, {k: v for k, v in outcome.summary.items() if k != "rank_summary"})
    return outcome


def delay_injector(spec: RunSpec, world_size: int) -> DelayInjector:
    return DelayInjector(kind=spec.imbalance_kind, ranks=spec.imbalance_ranks, delay_ms=spec.imbalance_delay_ms,
                         rank=spec.imbalance_rank, sigma=spec.imbalance_sigma, seed=spec.seed,
                         world_size=world_size)


def _build(spec: RunSpec, rank: int, device: torch.device) -> tuple[Dataset, torch.nn.Module, FlopCount | None]:
    """The run's data and model, on its device (a failure here is the configuration's or the
    factories', and would recur: a ``SetupError``, never retried)."""
    try:
        data = load_dataset(spec.dataset, spec.dataset_path, variable_length=spec.imbalance_kind == "inherent",
                            params=spec.params, seed=spec.seed)
        model = build_model(spec.model, data.input_shape, data.num_classes, spec.seed, params=spec.params)
    except Exception as exc:
        raise SetupError(f"{type(exc).__name__}: {exc}") from exc
    flops = _counted_flops(model, data) if rank == 0 else None
    model = model.to(device)
    if spec.compute == "emulated":
        from .emulation import ComputeProfile, emulate_compute

        emulate_compute(model, ComputeProfile.load(spec.compute_profile), spec.seed, rank, data.x_train[:1])
    elif spec.compute == "padded":   # real compute, each step held to at least the profile's times
        from .emulation import ComputeProfile, pad_compute

        pad_compute(model, ComputeProfile.load(spec.compute_profile), spec.seed, rank)
    return data, model, flops


def _counted_flops(model: torch.nn.Module, data: Dataset) -> FlopCount:
    """FLOPs per training sample (``flops.count_training_flops``), counted before the model is
    placed or emulated; a model the counter cannot run is no reason to fail the run (NaN)."""
    try:
        return count_training_flops(model, data.x_train[:2], data.y_train[:2])
    except Exception:   # noqa: BLE001 - MFU is then unknown, and stored as such
        return FlopCount(float("nan"), float("nan"))


def _gradient_sync(spec: RunSpec, model: torch.nn.Module, comm: MPI.Comm, clock: AlignedClock,
                   sampler: GlobalBatchSampler, run_dir: Path):
    options = SyncOptions(fusion_threshold_mb=spec.fusion_threshold_mb, cycle_time_ms=spec.cycle_time_ms,
                          autotune=spec.autotune, engine_thread=spec.engine_thread,
                          timeline=spec.timeline, clock=clock.now, device=spec.device, seed=spec.seed,
                          data_path=resolve_data_path(spec.algorithm, spec.device, spec.data_path),
                          sync_every=spec.resync_period(sampler.steps_per_epoch()), catch_up=spec.eager_catch_up,
                          total_steps=sampler.steps_per_epoch() * spec.epochs,
                          run_dir=str(run_dir))
    engine = build_gradient_sync(spec.algorithm, model, comm, options)
    engine.broadcast_parameters()
    engine.set_optimizer(torch.optim.SGD(engine.params, lr=spec.lr, momentum=spec.momentum))
    return engine


def _timed_step(engine, data: Dataset, idx, device: torch.device, step: int, delay: float, mark: StepClock):
    """One step; its loss and the seven time marks between its phases (``STEP_PHASES``), each
    taken once the device has done the phase's work (``StepClock``)."""
    t0 = mark()
    engine.begin_step(step)
    x, y = data.x_train[idx].to(device, non_blocking=True), data.y_train[idx].to(device, non_blocking=True)
    t1 = mark()
    engine.zero_grad()
    loss = objective.loss(engine.module(x), y)
    t2 = mark()
    if delay:
        time.sleep(delay)
    t2d = mark()
    loss.backward()
    t3 = mark()
    engine.synchronize()
    t4 = mark()
    engine.step()
    t5 = mark()
    return loss, (t0, t1, t2, t2d, t3, t4, t5)


def _write_rounds(writer: MetricsWriter, rank: int, rounds) -> None:
    """eager-SGD's rounds (rank 0 writes the round, every rank what it contributed)."""
    for record in rounds:
        if rank == 0 and not record.get("resync"):   # a resync's drift is a contribution record alone
            writer.round(**record)
        writer.contribution(round=record["round"], local=record["local"], staleness=record["staleness"],
                            drift=record.get("drift"), **({"agreed": record["agreed"]} if "agreed" in record else {}))


def _compute_unit(placement: dict[str, Any], device: torch.device, flops: float) -> dict[str, Any]:
    """What ``flops.total_peak`` needs of this rank: its host, threads and CPU record, and on a GPU
    the GPU's identity on its host (UUID, PCI bus id; an index only where one GPU is listed)."""
    unit = {k: placement.get(k) for k in ("host", "threads", "cpus", "host_cpus", "cgroup_cpus", "cpu_quota",
                                          "cpu_quota_cgroup")}
    gpu = placement.get("gpu") or {}
    listed = str(gpu.get("visible") or "")
    ident = gpu.get("uuid") or gpu.get("pci_bus_id") or (listed if listed and "," not in listed
                                                         else f"{listed}[{device.index}]")
    return {**unit, "device": device.type, "flops": flops, "gpu": ident if device.type == "cuda" else None}


def _train_loop(spec: RunSpec, comm: MPI.Comm, clock: AlignedClock, writer: MetricsWriter,
                run_dir: Path, device: torch.device, placement: dict[str, Any]) -> TrainOutcome:
    rank, size = comm.Get_rank(), comm.Get_size()
    spec = spec.as_run()   # every draw below (data order, weights, delays, emulation, eager-SGD's initiator) from run_seed
    data, model, flops = _build(spec, rank, device)
    all_arrived(comm)   # before the engines' first collectives (a communicator's Dup)
    delays = delay_injector(spec, size)
    utilization = UtilizationSampler(device)
    try:
        if spec.algorithm == "async_ps":
            from .algorithms.async_ps import train_async_ps

            outcome = train_async_ps(spec, comm, clock, writer, data, model, delays, device)
        else:
            outcome = _synchronous_loop(spec, comm, clock, writer, run_dir, device, data, model, delays)
    finally:
        busy = utilization.stop()
    outcome.summary["rank_summary"].update(gpu_peak_memory_bytes=peak_memory_bytes(device), gpu_utilization=busy)
    count: FlopCount = comm.bcast(flops, root=0)
    share = count.convolution / count.total if count.total > 0 else 1.0
    peak = rank_peak(device, share)
    unit = _compute_unit(placement, device, peak.flops)
    units = comm.allgather(unit)
    if rank == 0:
        # the parameter server (rank 0 of async_ps) computes no samples: its device is not the work's
        computing = units[1:] if spec.algorithm == "async_ps" else units
        total = total_peak(computing)
        emulated = spec.compute == "emulated"   # slept compute: its throughput is the profile's, not this device's
        outcome.summary.update(
            model_flops_per_sample=count.total, peak_flops=total.flops,
            peak_source=f"{peak.source}; {total.source}" + ("; emulated compute: no MFU" if emulated else ""),
            mfu=float("nan") if emulated else mfu(outcome.summary["throughput"], count.total, total.flops))
    return outcome


def _synchronous_loop(spec: RunSpec, comm: MPI.Comm, clock: AlignedClock, writer: MetricsWriter, run_dir: Path,
                      device: torch.device, data: Dataset, model: torch.nn.Module,
                      delays: DelayInjector) -> TrainOutcome:
    """Every algorithm but the parameter server: one gradient sync engine, a step at a time."""
    rank, size = comm.Get_rank(), comm.Get_size()
    sampler = GlobalBatchSampler(len(data.x_train), spec.batch_size, rank, size, spec.seed, spec.steps_per_epoch)
    engine = _gradient_sync(spec, model, comm, clock, sampler, run_dir)
    mark = StepClock(device)
    phases = dict.fromkeys(STEP_PHASES, 0.0)
    per_epoch = sampler.steps_per_epoch()
    total_steps = per_epoch * spec.epochs
    step = gradients = samples_computed = evaluated = 0
    eval_seconds = 0.0
    timeline_loop, timeline_events = 0.0, 0   # the timeline's time on this loop, and its events written
    last_top1 = last_loss = float("nan")
    # eager-SGD evaluates without a collective (workloads/evaluation.py): a barrier each epoch would
    # hold every rank to the slowest; an emulated run computes nothing worth scoring
    sharded = ShardedEvaluation(comm, data, device, writer.eval) \
        if spec.algorithm in EAGER_ALGORITHMS and spec.compute != "emulated" else None
    batches, batches_of = [], -1
    all_arrived(comm)   # asleep, then the timed part starts together
    comm.Barrier()
    wall_start = time.perf_counter()
    try:
        # one step = one round of the job (every rank's model is updated once); a rank normally
        # computes each, but eager-SGD lets a late rank go on at the round the others reached
        # (engine.next_step): it computes fewer gradients than there are steps
        while step < total_steps:
            epoch, within = divmod(step, per_epoch)
            if batches_of != epoch:
                batches, batches_of = list(sampler.epoch(epoch)), epoch
            idx = batches[within]
            t_start = clock.now()
            loss, marks = _timed_step(engine, data, idx, device, step, delays.seconds(step, rank), mark)
            gradients += 1
            samples_computed += len(idx)
            record_step(writer, phases, step, epoch, len(idx), t_start, loss.item(), marks)
            if spec.timeline:   # drained every step; written in the spec's window and rank sample only
                loop_start = time.perf_counter()
                events = [e for e in engine.drain_events() if spec.records_timeline(int(e.get("step", step)), rank)]
                # an engine event may be drained a step late: each is kept by its own step, the
                # training thread's phases by this one
                timeline_events += _write_step_events(writer, step, t_start, marks[0], marks[1:], events,
                                                      phases=spec.records_timeline(step, rank))
                timeline_loop += time.perf_counter() - loop_start
            _write_rounds(writer, rank, engine.drain_rounds())
            step = min(engine.next_step(step), total_steps)
            # every epoch this rank's steps have passed ends with an evaluation (each rank ends every
            # epoch exactly once, whichever steps it computed)
            while evaluated < step // per_epoch:
                eval_start = time.perf_counter()
                seen = {"samples_seen": (evaluated + 1) * per_epoch * sampler.global_batch_size}
                if sharded is not None:
                    sharded.epoch(engine.module, evaluated, time.perf_counter() - wall_start, seen)
                else:   # a collective: synchronous training waits for every rank at each step anyway
                    last_top1, last_loss = (evaluate(engine.module, data, comm, device) if spec.compute != "emulated"
                                            else (float("nan"), float("nan")))
                    if rank == 0:
                        writer.eval(epoch=evaluated, wall=time.perf_counter() - wall_start, top1=last_top1,
                                    loss=last_loss, **seen)
                eval_seconds += time.perf_counter() - eval_start
                evaluated += 1
            if sharded is not None and rank == 0:
                sharded.poll()
    finally:
        engine.close()
    train_seconds = time.perf_counter() - wall_start - eval_seconds
    if sharded is not None:
        last_top1, last_loss = sharded.finish()

    outcome = make_outcome(spec, comm, model, steps=step, samples=comm.allreduce(samples_computed),
                           train_seconds=train_seconds, wall_start=wall_start, phases=phases, top1=last_top1,
                           loss=last_loss, global_batch=sampler.global_batch_size,
                           gradients=comm.allreduce(gradients))
    _add_run_facts(outcome, engine, data, device, comm, run_dir)
    if spec.timeline:
        _add_timeline_cost(outcome, writer, timeline_loop, timeline_events, train_seconds)
    return outcome


def _add_timeline_cost(outcome: TrainOutcome, writer: MetricsWriter, loop_seconds: float, events: int,
                       train_seconds: float) -> None:
    """What this rank's timeline cost it, counted where it was paid (``query.timeline_cost``):
    the loop's seconds handing events over and the writer thread's CPU seconds, which a step-time
    comparison cannot resolve to 1 % on a shared machine."""
    outcome.summary["rank_summary"]["timeline_cost"] = {
        "loop_seconds": loop_seconds, "events": events, "train_seconds": train_seconds,
        **(writer.events_cost() or {})}


def _add_run_facts(outcome: TrainOutcome, engine, data: Dataset, device: torch.device, comm: MPI.Comm,
                   run_dir: Path) -> None:
    """What the run's summary carries beside its rates: the metrics the engine decided, the data
    path it used, the classes (top-1 at chance is 1 / classes), on a GPU the network NCCL chose."""
    decided = engine.run_metrics()
    if decided:
        outcome.summary["metrics"] = decided
    outcome.summary["data_path_used"] = engine.data_path_label
    outcome.summary["classes"] = data.num_classes
    if device.type == "cuda" and comm.Get_rank() == 0:
        # from NCCL's log (all ranks have passed a collective); rank 0 only: only its summary
        # reaches result.json, and every rank reading every log is ranks^2 opens
        outcome.summary.update(network_facts(run_dir))


def _write_step_events(writer: MetricsWriter, step: int, t_start: float, t0: float,
                       marks: tuple[float, ...], engine_events: list[dict[str, Any]], phases: bool = True) -> int:
    """Main-thread phases (on the aligned clock) plus the engine's events for this step; how many."""
    def at(t: float) -> float:
        return t_start + (t - t0)

    t1, t2, t2d, t3, t4, t5 = marks
    written = 0
    for phase, a, b in (("forward", t1, t2), ("delay", t2, t2d), ("backward", t2d, t3), ("wait", t3, t4),
                        ("update", t4, t5)):
        if phases and (b > a or phase != "delay"):
            writer.event(step=step, tensor="-", phase=phase, t0=at(a), t1=at(b), bytes=0)
            written += 1
    for event in engine_events:
        writer.event(**event)
    return written + len(engine_events)
