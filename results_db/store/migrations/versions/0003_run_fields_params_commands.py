"""Every field of a run gets a column (momentum, steps_per_epoch, dataset_path, repeat,
imbalance_rank, imbalance_sigma), free parameters, command workloads (command, exit
code, output tail, metrics), reported step durations, and evals without accuracy.

Columns that existed only inside the stored spec are back-filled from it, so older runs
that differ in momentum or steps_per_epoch stop looking like repeats of each other.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""
import json

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# (column, type, default for runs whose stored spec lacks it); all nullable
RUN_COLUMNS = [
    ("dataset_path", sa.Text, None),
    ("steps_per_epoch", sa.Integer, None),
    ("momentum", sa.Float, None),
    ("repeat", sa.Integer, 0),
    ("imbalance_rank", sa.Integer, -1),
    ("imbalance_sigma", sa.Float, 1.0),
    ("workload_kind", lambda: sa.String(length=16), "builtin"),
    ("command", sa.JSON, []),
    ("params", sa.JSON, {}),
    ("metrics", sa.JSON, None),
    ("exit_code", sa.Integer, None),
    ("output_tail", sa.Text, None),
]
FROM_SPEC = ("dataset_path", "steps_per_epoch", "momentum", "repeat", "imbalance_rank", "imbalance_sigma",
             "workload_kind", "command", "params")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, kind, _ in RUN_COLUMNS:
            batch_op.add_column(sa.Column(name, kind(), nullable=True))
        batch_op.alter_column("model", existing_type=sa.String(length=64), type_=sa.String(length=255),
                              existing_nullable=False)
        batch_op.alter_column("dataset", existing_type=sa.String(length=64), type_=sa.String(length=255),
                              existing_nullable=False)
    with op.batch_alter_table("steps") as batch_op:
        batch_op.add_column(sa.Column("seconds", sa.Float(), nullable=True))
    with op.batch_alter_table("evals") as batch_op:
        batch_op.alter_column("top1", existing_type=sa.Float(), nullable=True)
        batch_op.alter_column("loss", existing_type=sa.Float(), nullable=True)
        batch_op.alter_column("samples_seen", existing_type=sa.Integer(), nullable=True)

    # back-fill from each run's stored spec (the spec always held every field it had)
    conn = op.get_bind()
    runs = sa.table("runs", sa.column("id", sa.Integer()), sa.column("spec", sa.JSON()),
                    *[sa.column(name, kind()) for name, kind, _ in RUN_COLUMNS if name in FROM_SPEC])
    defaults = {name: d for name, _, d in RUN_COLUMNS}
    for run_id, spec in conn.execute(sa.select(runs.c.id, runs.c.spec)).all():
        spec = json.loads(spec) if isinstance(spec, str) else (spec or {})
        values = {name: spec.get(name, defaults[name]) for name in FROM_SPEC}
        conn.execute(runs.update().where(runs.c.id == run_id).values(**values))


def downgrade() -> None:
    with op.batch_alter_table("evals") as batch_op:
        batch_op.alter_column("samples_seen", existing_type=sa.Integer(), nullable=False)
        batch_op.alter_column("loss", existing_type=sa.Float(), nullable=False)
        batch_op.alter_column("top1", existing_type=sa.Float(), nullable=False)
    with op.batch_alter_table("steps") as batch_op:
        batch_op.drop_column("seconds")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.alter_column("dataset", existing_type=sa.String(length=255), type_=sa.String(length=64),
                              existing_nullable=False)
        batch_op.alter_column("model", existing_type=sa.String(length=255), type_=sa.String(length=64),
                              existing_nullable=False)
        for name, _, _ in reversed(RUN_COLUMNS):
            batch_op.drop_column(name)
