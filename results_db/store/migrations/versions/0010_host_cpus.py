"""``runs.host_cpus``: the fewest CPUs any of a run's hosts' ranks could run on (per host,
the union of their affinities, which the workload now records in ``run_start``), so the
performance model counts a pinned run's ranks per core from what the run saw.
Runs recorded before this revision did not record their affinity: left null (the model
then takes the site file's cores).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("host_cpus", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("host_cpus")
