"""``engine_thread``: whether a ``sync`` run's engine ran its cycles on a thread of its own.

Since this revision the engine runs its cycles on the training thread by default (from the
gradient hooks). Runs recorded before it used the engine thread, and their stored spec
does not say so: they are back-filled with true.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("engine_thread", sa.Boolean(), nullable=True))
    runs = sa.table("runs", sa.column("engine_thread", sa.Boolean()), sa.column("algorithm", sa.String()))
    op.execute(runs.update().where(runs.c.algorithm == "sync").values(engine_thread=sa.true()))
    op.execute(runs.update().where(runs.c.algorithm != "sync").values(engine_thread=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("engine_thread")
