"""A study made by the performance model itself, written through the ORM into a results
database: steps whose compute is C(b) plus normal noise, and per step three fused
collectives timed by the ring formula, started after backward ended. Fits of it must
recover the parameters (``test_perf_model``) and predictions from it must follow the
equations (``test_perf_predict``)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from perf_model.terms import allreduce_seconds, compute_seconds

C0, C1, SIGMA, LATENCY, BANDWIDTH = 0.004, 0.002, 0.001, 1e-5, 2e9
BUFFERS = (4e3, 4e5, 4e7)
STEPS = 100


def write_study(engine, study: str = "syn", configs=((8, 2), (8, 4), (16, 2), (16, 4), (32, 2), (32, 4)),
                algorithm: str = "sync", seed: int = 1, overhead: float = 10.0,
                comm_wait: Callable[[int, int | None], float] | None = None, site: str = "local") -> list[int]:
    """Runs of ``(batch, ranks)`` or ``(batch, ranks, host_cpus)`` (the CPUs its ranks could
    run on, as a pinned run records them; else not recorded) on one node each (run folder
    ``/nowhere``), each with ``overhead`` seconds of start-up beside its steps; returns their
    run ids. ``comm_wait(P, host_cpus)``: seconds every rank of a P-rank run waits in each
    step (default none), e.g. the wait and communication the model predicts plus its
    oversubscription term."""
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from results_db.store.runs import PlannedRun, register_runs
    from results_db.store.schema import Event, Run, Step
    from workloads.spec import RunSpec

    configs = [(c[0], c[1], c[2] if len(c) > 2 else None) for c in configs]
    plans = [PlannedRun(f"{study}-k{i}", dataclasses.replace(RunSpec(study=study, site=site), batch_size=b,
                                                              workers_per_node=p, threads_per_node=p,
                                                              algorithm=algorithm).to_dict(),
                        "/nowhere") for i, (b, p, _) in enumerate(configs)]
    decisions = register_runs(engine, study, plans)
    rng = np.random.default_rng(seed)
    with Session(engine) as s, s.begin():
        for d, (b, p, cpus) in zip(decisions, configs):
            s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=1.0, steps=STEPS,
                                                                   wall_seconds=20.0 + overhead, train_seconds=20.0,
                                                                   host_cpus=cpus))
            mean = float(compute_seconds(b, 1, C0, C1, 0.0))
            waited = float(comm_wait(p, cpus)) if comm_wait else 0.0
            for k in range(STEPS):
                t = float(k)
                for r in range(p):
                    c = mean + SIGMA * rng.standard_normal()
                    s.add(Step(run_id=d.run_id, rank=r, step=k, epoch=0, samples=b, t_start=t, data=0.0,
                               forward=c / 3, backward=2 * c / 3, comm_wait=waited, update=0.0))
                    # backward ends at t on every rank: the collectives below start after it
                    s.add(Event(run_id=d.run_id, rank=r, step=k, tensor="-", phase="backward", t0=t - 0.01, t1=t,
                                bytes=0))
                    # one collective while backward ran: its end is the engine cycle that noticed it
                    # (collective_times leaves it out; kept, it would wreck the fit: 5 ms for 4 KB)
                    s.add(Event(run_id=d.run_id, rank=r, step=k, tensor="fused-early", phase="allreduce",
                                t0=t - 0.006, t1=t - 0.001, bytes=4000))
                for j, n in enumerate(BUFFERS):
                    seconds = float(allreduce_seconds(n, p, LATENCY, BANDWIDTH))
                    for r in range(p):   # ranks start up to 1 ms apart; the data moves after the last
                        start = t + 0.001 * r / p
                        s.add(Event(run_id=d.run_id, rank=r, step=k, tensor=f"fused-{j}", phase="allreduce",
                                    t0=start, t1=t + 0.001 * (p - 1) / p + seconds, bytes=int(n)))
    return [d.run_id for d in decisions]
