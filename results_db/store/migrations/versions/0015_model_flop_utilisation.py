"""Model FLOP utilisation: each run's counted FLOPs per training sample, the summed peak FLOP/s
of its ranks' devices (with what the peak was read from and assumed), and MFU.

Runs recorded before this revision counted nothing: null, and nothing is said of them.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_COLUMNS = (("model_flops_per_sample", sa.Float()), ("peak_flops", sa.Float()), ("peak_source", sa.Text()),
            ("mfu", sa.Float()))


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, kind in _COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, _ in reversed(_COLUMNS):
            batch_op.drop_column(name)
