"""``engine_thread`` (where a ``sync`` run's engine ran its cycles) and ``compute``,
``compute_profile`` (emulated runs: forward and backward slept from a recorded profile).

Runs recorded before this revision ran their engine on its thread (the default; the option
to run its cycles on the training thread came with it) and computed for real: they are
back-filled so.

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
        batch_op.add_column(sa.Column("compute", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("compute_profile", sa.Text(), nullable=True))
    runs = sa.table("runs", sa.column("engine_thread", sa.Boolean()), sa.column("compute", sa.String()))
    op.execute(runs.update().values(engine_thread=sa.true(), compute="real"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("compute_profile")
        batch_op.drop_column("compute")
        batch_op.drop_column("engine_thread")
