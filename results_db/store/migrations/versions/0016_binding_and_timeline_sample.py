"""The binding audit and the timeline's sample: ``binding``, the audit's findings on where a run's
ranks ran (results_db/analysis/binding.py: one line per finding, [] checked and clean); ``timeline_steps``
and ``timeline_ranks``, the window of steps and the sample of ranks a timeline records (empty and
0: every one).

Runs recorded before this revision were not audited (binding null) and recorded every step of
every rank's timeline: their ``timeline_steps`` is back-filled empty and ``timeline_ranks`` 0,
what those mean.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_COLUMNS = (("binding", sa.JSON()), ("timeline_steps", sa.String(length=255)), ("timeline_ranks", sa.Integer()))


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, kind in _COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
    runs = sa.table("runs", sa.column("timeline_steps", sa.String()), sa.column("timeline_ranks", sa.Integer()))
    op.execute(runs.update().values(timeline_steps="", timeline_ranks=0))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, _ in reversed(_COLUMNS):
            batch_op.drop_column(name)
