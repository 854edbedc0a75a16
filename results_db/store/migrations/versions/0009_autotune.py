"""``runs.autotune``: whether a ``sync`` or ``horovod`` run chose its cycle time itself
(for ``sync`` the choice and its trials are in the run's ``metrics``; Horovod keeps its
own). Runs recorded before this revision ran with the
cycle time they were given: back-filled false.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("autotune", sa.Boolean(), nullable=True))
    runs = sa.table("runs", sa.column("autotune", sa.Boolean()))
    op.execute(runs.update().values(autotune=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("autotune")
