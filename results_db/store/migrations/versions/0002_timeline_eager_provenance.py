"""Timeline events and derived step stats, eager-SGD rounds, imbalance and engine
settings, sweep drivers, provenance, and an index for per-study figure queries.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

def new_run_columns() -> list[sa.Column]:
    return [
        sa.Column("fusion_threshold_mb", sa.Float(), nullable=True),
        sa.Column("cycle_time_ms", sa.Float(), nullable=True),
        sa.Column("timeline", sa.Boolean(), nullable=True),
        sa.Column("device", sa.String(length=16), nullable=True),
        sa.Column("sync_every", sa.Integer(), nullable=True),
        sa.Column("imbalance_kind", sa.String(length=16), nullable=True),
        sa.Column("imbalance_ranks", sa.Integer(), nullable=True),
        sa.Column("imbalance_delay_ms", sa.Float(), nullable=True),
        sa.Column("git_commit", sa.String(length=40), nullable=True),
        sa.Column("git_dirty", sa.Boolean(), nullable=True),
        sa.Column("environment", sa.JSON(), nullable=True),
        sa.Column("config", sa.JSON(), nullable=True),
        sa.Column("driver", sa.String(length=255), nullable=True),
        sa.Column("heartbeat", sa.Float(), nullable=True),
    ]


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for column in new_run_columns():
            batch_op.add_column(column)
        batch_op.create_index("ix_runs_study_algorithm_nodes", ["study_id", "algorithm", "nodes"], unique=False)
    with op.batch_alter_table("steps") as batch_op:
        batch_op.add_column(sa.Column("delay", sa.Float(), nullable=True))
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("tensor", sa.String(length=255), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("t0", sa.Float(), nullable=False),
        sa.Column("t1", sa.Float(), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("tensors", sa.Text(), nullable=True),
        sa.Column("arrival", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_events_run_step", "events", ["run_id", "step"], unique=False)
    op.create_table(
        "rounds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("initiator", sa.Integer(), nullable=False),
        sa.Column("fresh", sa.Integer(), nullable=False),
        sa.Column("stale", sa.Integer(), nullable=False),
        sa.Column("null", sa.Integer(), nullable=False),
        sa.Column("synchronous", sa.Boolean(), nullable=False),
        sa.Column("t0", sa.Float(), nullable=False),
        sa.Column("latency", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "round"),
    )
    op.create_table(
        "step_stats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("collectives", sa.Integer(), nullable=False),
        sa.Column("allreduce_seconds", sa.Float(), nullable=False),
        sa.Column("arrival_skew_max", sa.Float(), nullable=True),
        sa.Column("arrival_skew_mean", sa.Float(), nullable=True),
        sa.Column("hidden_fraction", sa.Float(), nullable=True),
        sa.Column("update_delay", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "step"),
    )


def downgrade() -> None:
    op.drop_table("step_stats")
    op.drop_table("rounds")
    op.drop_index("ix_events_run_step", table_name="events")
    op.drop_table("events")
    with op.batch_alter_table("steps") as batch_op:
        batch_op.drop_column("delay")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_index("ix_runs_study_algorithm_nodes")
        for column in reversed(new_run_columns()):
            batch_op.drop_column(column.name)
