"""ORM models of the results database (SQLAlchemy 2 declarative).

Every field of a run (``workloads.spec.FIELDS``) has its own column on ``runs``, so
that figures and comparisons are plain SQL over typed columns; the full resolved spec
is kept beside them as JSON. Migrations are frozen copies of these shapes;
``tests/orchestrator/test_axis_registry.py`` checks that a migrated database matches them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from sqlalchemy import (JSON, Boolean, Column, DateTime, Float, ForeignKey, Index, Integer, String, Table, Text,
                        UniqueConstraint, text, true)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from workloads.spec import FIELDS, RunField

from .measure import measure   # which way each measure is better: one declaration, beside its column

def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Study(Base):
    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    runs: Mapped[list["Run"]] = relationship(back_populates="study")


# -- runs: fixed columns, plus one column per field of a run (workloads.spec.FIELDS) -----------

# Columns the first schema made NOT NULL; every column added since is nullable (old rows).
_NOT_NULL = ("site", "nodes", "workers_per_node", "threads_per_node", "batch_size", "algorithm", "model", "dataset",
             "epochs", "lr", "seed")
# String lengths a column has had since it was created; other strings are 255 long.
_STRING_LENGTHS = {"site": 128, "algorithm": 64, "device": 16, "imbalance_kind": 16, "workload_kind": 16,
                   "compute": 16, "data_path": 32}
_TEXT = ("dataset_path", "compute_profile")


def field_sql_type(f: RunField):
    if f.type is bool:
        return Boolean()
    if f.type is int:
        return Integer()
    if f.type is float:
        return Float()
    if f.type in (dict, tuple):
        return JSON()
    return Text() if f.name in _TEXT else String(_STRING_LENGTHS.get(f.name, 255))


def field_columns() -> list[Column]:
    """The runs columns of the registry's fields, in registry order."""
    return [Column(f.name, field_sql_type(f), nullable=f.name not in _NOT_NULL) for f in FIELDS if f.column]


runs_table = Table(
    "runs", Base.metadata,
    Column("id", Integer, primary_key=True),
    Column("study_id", ForeignKey("studies.id"), nullable=False, index=True),
    Column("run_key", String(64), nullable=False),
    # Every attempt at a run keeps its own row and measurements (a rerun, a retry after a crash,
    # a timeout or a lost node): measurements are data. ``latest`` marks the one readers see by default.
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    Column("latest", Boolean, nullable=False, server_default=true()),
    # pending, running, done, partial (metrics cut off mid-line), failed, timeout, lost (its node died),
    # interrupted (its sweep stopped before it ended: Ctrl-C; resumed by the same command)
    Column("status", String(16), nullable=False, index=True),
    *field_columns(),
    Column("world_size", Integer, nullable=False),
    Column("global_batch_size", Integer, nullable=False),
    Column("spec", JSON, nullable=False),                     # the whole resolved spec
    Column("run_dir", Text),
    Column("job_id", String(64)),
    Column("git_commit", String(40)),                         # the project's commit at submission
    Column("git_dirty", Boolean),                             # uncommitted changes at submission
    Column("environment", JSON),                              # orchestrator-side versions and host
    Column("config", JSON),                                   # the full resolved job config
    Column("driver", String(255)),                            # host:pid of the sweep driving it
    Column("heartbeat", Float),                               # epoch seconds, refreshed while driven
    Column("hosts", Text),
    # the fewest CPUs any of the run's hosts' ranks could run on (per hostname, the union of
    # its ranks' affinities, run_start ``cpus``; null if none recorded): the model's ranks per core
    Column("host_cpus", Integer),
    Column("versions", JSON),                                 # python, torch, MPI; on GPUs cuda, nccl, driver
    Column("data_path_used", String(64)),                     # the path its gradients took (mpi, torch_distributed:nccl, ...)
    Column("gpu_model", String(128)),                         # the GPUs' model, as CUDA names it (null: no GPU)
    Column("gpus", Integer),                                  # distinct GPUs the run's ranks used
    Column("gpu_peak_memory_mb", Float, info=measure("lower", "MB")),                      # the largest peak any rank allocated (MB)
    Column("gpu_utilization", Float, info=measure("higher", "%")),                         # mean NVML utilisation (%), null where NVML was absent
    # the network NCCL logged ("AWS Libfabric", "Socket": its TCP fallback; several, comma-separated, where
    # the ranks differed) and the plugin the run's site declares; null where no NCCL communicator ran
    Column("nccl_network", String(128)),
    Column("nccl_plugin", String(64)),
    # threads per CPU on the run's most crowded host (its ranks' threads over the CPUs they could
    # use); above 1 the ranks shared cores. Null where a host's ranks recorded no affinity
    Column("host_load", Float),
    # what the study's model fit predicted this run would take (seconds) and which fit: the
    # run's wall_seconds checks the prediction (``model predict`` shows how far off it was)
    Column("predicted_seconds", Float),
    Column("predicted_by_fit", Integer),
    # the energy its hosts drew over the run, from their counters (workloads/energy.py); null
    # where no host had one or a counter was lost (energy_note says why): never a TDP guess
    Column("energy_joules", Float, info=measure("lower", "J")),
    Column("energy_watts", Float, info=measure("lower", "W")),                            # mean watts per host over the run
    Column("energy_source", String(64)),                      # pm_counters, rapl, nvml
    Column("energy_kind", String(16)),                        # measured
    Column("energy_note", Text),
    Column("throughput", Float, info=measure("higher", "samples/s", speed=True)),                              # samples whose gradients were computed, per second
    # the job's steps (rounds: each one update of every model) and all ranks' computed gradients,
    # per second; they part from throughput once an eager-SGD rank skips the rounds it missed
    Column("rounds_per_second", Float, info=measure("higher", "rounds/s", speed=True)),
    Column("gradients_per_second", Float, info=measure("higher", "gradients/s", speed=True)),
    Column("classes", Integer),                               # the data's classes: top-1 at chance is 1 / classes
    # model FLOP utilisation (workloads/flops.py): counted FLOPs per sample (forward + backward, a lower
    # bound), the ranks' summed peak FLOP/s and what it was read from, throughput x FLOPs / peak
    Column("model_flops_per_sample", Float),
    Column("peak_flops", Float),
    Column("peak_source", Text),
    Column("mfu", Float, info=measure("higher")),
    # the binding audit (results_db/analysis/binding.py): one line per finding; [] checked and clean, null unrecorded
    Column("binding", JSON),
    # the run's timeline as a Parquet file (results_db/store/event_files.py), named relative to the database's
    # events folder; null where its events, if any, are rows of the events table
    Column("events_file", String(255)),
    Column("train_seconds", Float, info=measure("lower", "s", speed=True)),
    Column("wall_seconds", Float, info=measure("lower", "s", speed=True)),
    Column("steps", Integer),
    Column("final_top1", Float, info=measure("higher")),
    Column("final_loss", Float, info=measure("lower")),
    Column("metrics", JSON),                                  # a command's other metrics, name -> value
    Column("exit_code", Integer),                             # a command's exit code
    Column("output_tail", Text),                              # the last lines of a command's output
    Column("error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("ingested_at", DateTime(timezone=True)),
    UniqueConstraint("study_id", "run_key", "attempt", name="uq_runs_study_run_attempt"),
    Index("ix_runs_study_algorithm_nodes", "study_id", "algorithm", "nodes"),
    Index("ix_runs_study_status_latest", "study_id", "status", "latest"),   # status counts from the index
)


class Run(Base):
    """One run of a study (columns: ``runs_table``)."""

    __table__ = runs_table
    __mapper_args__ = {"eager_defaults": False}

    study: Mapped[Study] = relationship(back_populates="runs")

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("status", "pending")
        kwargs.setdefault("attempt", 1)
        kwargs.setdefault("latest", True)
        kwargs.setdefault("created_at", utcnow())
        super().__init__(**kwargs)


class Step(Base):
    __tablename__ = "steps"
    __table_args__ = (Index("ix_steps_run_rank_step", "run_id", "rank", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    rank: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    t_start: Mapped[float] = mapped_column(Float)
    data: Mapped[float] = mapped_column(Float)
    forward: Mapped[float] = mapped_column(Float)
    backward: Mapped[float] = mapped_column(Float)
    comm_wait: Mapped[float] = mapped_column(Float)
    update: Mapped[float] = mapped_column(Float)
    delay: Mapped[Optional[float]] = mapped_column(Float)   # injected load imbalance (sleep) in this step
    loss: Mapped[Optional[float]] = mapped_column(Float)
    seconds: Mapped[Optional[float]] = mapped_column(Float)  # the whole step, when reported (else: the phases' sum)


class Event(Base):
    """One timeline interval of one rank (``timeline=true``): a phase, a tensor, or a fused collective."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_run_step", "run_id", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    rank: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    tensor: Mapped[str] = mapped_column(String(255))
    phase: Mapped[str] = mapped_column(String(32))
    t0: Mapped[float] = mapped_column(Float)
    t1: Mapped[float] = mapped_column(Float)
    bytes: Mapped[int] = mapped_column(Integer)
    tensors: Mapped[Optional[str]] = mapped_column(Text)   # fused collectives: the tensors in the buffer
    arrival: Mapped[Optional[float]] = mapped_column(Float)  # fused collectives: this rank's last tensor ready


class StepStat(Base):
    """Per-step measures derived from the timeline at ingestion."""

    __tablename__ = "step_stats"
    __table_args__ = (UniqueConstraint("run_id", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    step: Mapped[int] = mapped_column(Integer)
    collectives: Mapped[int] = mapped_column(Integer)
    allreduce_seconds: Mapped[float] = mapped_column(Float)        # mean over ranks
    arrival_skew_max: Mapped[Optional[float]] = mapped_column(Float)   # seconds, worst collective
    arrival_skew_mean: Mapped[Optional[float]] = mapped_column(Float)
    hidden_fraction: Mapped[Optional[float]] = mapped_column(Float)    # allreduce time overlapped with backward
    update_delay: Mapped[Optional[float]] = mapped_column(Float)       # end of previous update to start of this one


class Round(Base):
    """One round of eager-SGD's partial allreduce, as rank 0 saw it."""

    __tablename__ = "rounds"
    __table_args__ = (UniqueConstraint("run_id", "round"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    round: Mapped[int] = mapped_column(Integer)
    initiator: Mapped[int] = mapped_column(Integer)     # -1: a synchronous round
    fresh: Mapped[int] = mapped_column(Integer)         # ranks whose gradient of this step made it
    stale: Mapped[int] = mapped_column(Integer)         # ranks contributing gradients that missed earlier rounds
    null: Mapped[int] = mapped_column(Integer)          # ranks contributing nothing
    synchronous: Mapped[bool] = mapped_column(Boolean)
    t0: Mapped[float] = mapped_column(Float)
    latency: Mapped[float] = mapped_column(Float)       # rank 0 joined -> reduction complete, seconds


class Eval(Base):
    __tablename__ = "evals"
    __table_args__ = (Index("ix_evals_run_epoch", "run_id", "epoch"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    epoch: Mapped[int] = mapped_column(Integer)
    wall: Mapped[float] = mapped_column(Float)
    top1: Mapped[Optional[float]] = mapped_column(Float)
    loss: Mapped[Optional[float]] = mapped_column(Float)
    samples_seen: Mapped[Optional[int]] = mapped_column(Integer)


class RankSummary(Base):
    __tablename__ = "rank_summaries"
    __table_args__ = (UniqueConstraint("run_id", "rank"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    rank: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    clock_offset: Mapped[Optional[float]] = mapped_column(Float)
    summary: Mapped[Optional[dict]] = mapped_column(JSON)


class ModelFit(Base):
    """A performance model fitted to a study's runs (``scalestudy model fit``): each term's
    parameters and quality, the terms the data could not determine and why, the runs used."""

    __tablename__ = "model_fits"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    terms: Mapped[dict] = mapped_column(JSON)            # name -> {params, quality, notes}
    unfitted: Mapped[dict] = mapped_column(JSON)         # name -> why it could not be fitted
    run_ids: Mapped[list] = mapped_column(JSON)
    warmup: Mapped[int] = mapped_column(Integer)
    workloads: Mapped[Optional[dict]] = mapped_column(JSON)   # algorithm -> what its runs measured (perf_model.shape)
    bootstrap: Mapped[Optional[list]] = mapped_column(JSON)   # [{term: params, "workloads": shapes}], refits on runs drawn whole


class Setting(Base):
    """The database's own facts, one row each (migration 0018). ``database_id``: a random UUID made
    once, which keys the database's timeline event files (``results_db.store.event_files.database_id``),
    so that databases sharing one events folder never share a file's name."""

    __tablename__ = "settings"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
