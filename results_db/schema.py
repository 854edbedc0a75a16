"""ORM models of the results database (SQLAlchemy 2 declarative).

Every sweep axis has its own column on ``runs`` so that figures and comparisons are
plain SQL over typed columns; the full resolved spec is kept beside them as JSON.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

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


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("study_id", "run_key"),
                      Index("ix_runs_study_algorithm_nodes", "study_id", "algorithm", "nodes"))

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    run_key: Mapped[str] = mapped_column(String(64))
    # pending, running, done, partial (metrics cut off mid-line), failed
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)

    site: Mapped[str] = mapped_column(String(128))
    nodes: Mapped[int] = mapped_column(Integer)
    workers_per_node: Mapped[int] = mapped_column(Integer)
    threads_per_node: Mapped[int] = mapped_column(Integer)
    world_size: Mapped[int] = mapped_column(Integer)
    batch_size: Mapped[int] = mapped_column(Integer)
    global_batch_size: Mapped[int] = mapped_column(Integer)
    algorithm: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(64))
    dataset: Mapped[str] = mapped_column(String(64))
    epochs: Mapped[int] = mapped_column(Integer)
    lr: Mapped[float] = mapped_column(Float)
    seed: Mapped[int] = mapped_column(Integer)
    fusion_threshold_mb: Mapped[Optional[float]] = mapped_column(Float)
    cycle_time_ms: Mapped[Optional[float]] = mapped_column(Float)
    timeline: Mapped[Optional[bool]] = mapped_column(Boolean)
    device: Mapped[Optional[str]] = mapped_column(String(16))
    sync_every: Mapped[Optional[int]] = mapped_column(Integer)
    imbalance_kind: Mapped[Optional[str]] = mapped_column(String(16))
    imbalance_ranks: Mapped[Optional[int]] = mapped_column(Integer)
    imbalance_delay_ms: Mapped[Optional[float]] = mapped_column(Float)
    spec: Mapped[dict] = mapped_column(JSON)

    run_dir: Mapped[Optional[str]] = mapped_column(Text)
    job_id: Mapped[Optional[str]] = mapped_column(String(64))
    git_commit: Mapped[Optional[str]] = mapped_column(String(40))       # the project's commit at submission
    git_dirty: Mapped[Optional[bool]] = mapped_column(Boolean)          # uncommitted changes at submission
    environment: Mapped[Optional[dict]] = mapped_column(JSON)           # orchestrator-side versions and host
    config: Mapped[Optional[dict]] = mapped_column(JSON)                # the full resolved job config
    driver: Mapped[Optional[str]] = mapped_column(String(255))          # host:pid of the sweep driving it
    heartbeat: Mapped[Optional[float]] = mapped_column(Float)           # epoch seconds, refreshed while driven
    hosts: Mapped[Optional[str]] = mapped_column(Text)
    versions: Mapped[Optional[dict]] = mapped_column(JSON)

    throughput: Mapped[Optional[float]] = mapped_column(Float)
    train_seconds: Mapped[Optional[float]] = mapped_column(Float)
    wall_seconds: Mapped[Optional[float]] = mapped_column(Float)
    steps: Mapped[Optional[int]] = mapped_column(Integer)
    final_top1: Mapped[Optional[float]] = mapped_column(Float)
    final_loss: Mapped[Optional[float]] = mapped_column(Float)
    error: Mapped[Optional[str]] = mapped_column(Text)

    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    ingested_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))

    study: Mapped[Study] = relationship(back_populates="runs")


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
    top1: Mapped[float] = mapped_column(Float)
    loss: Mapped[float] = mapped_column(Float)
    samples_seen: Mapped[int] = mapped_column(Integer)


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
