"""eager-SGD as the paper runs it: a late rank joins the round the others reached.

- ``resync_epochs`` (the models' re-synchronisation period in epochs, the paper's setting)
  and ``eager_catch_up`` (what a rank that missed rounds does: ``apply_all``, ``latest``,
  ``lockstep``); ``sync_every`` (steps) stays, now 0 unless set.
- ``rounds_per_second`` and ``gradients_per_second`` beside ``throughput`` (samples computed
  per second): once a rank can skip rounds they are different numbers.
- ``classes``: the data's classes, so that a top-1 at chance (1 / classes) is seen as such
  (runs recorded before: null, and nothing is said of them).

Runs recorded before this revision computed every round in order and re-synchronised every
``sync_every`` steps: eager-SGD's are back-filled ``lockstep`` with ``resync_epochs`` 0 (their
``sync_every`` already holds the period); every rank computed every step, so their rounds per
second are their steps per second (throughput over the global batch) and their gradients per
second their throughput over the batch per worker (our training loop's runs only: a command's
throughput is its own).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_COLUMNS = (("resync_epochs", sa.Integer()), ("eager_catch_up", sa.String(length=255)),
            ("rounds_per_second", sa.Float()), ("gradients_per_second", sa.Float()), ("classes", sa.Integer()))


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, kind in _COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
    runs = sa.table("runs", sa.column("algorithm", sa.String()), sa.column("resync_epochs", sa.Integer()),
                    sa.column("eager_catch_up", sa.String()), sa.column("throughput", sa.Float()),
                    sa.column("global_batch_size", sa.Integer()), sa.column("batch_size", sa.Integer()),
                    sa.column("workload_kind", sa.String()),
                    sa.column("rounds_per_second", sa.Float()), sa.column("gradients_per_second", sa.Float()))
    op.execute(runs.update().where(runs.c.algorithm.in_(("eager_solo", "eager_majority")))
               .values(resync_epochs=0, eager_catch_up="lockstep"))
    ours = (runs.c.throughput.isnot(None) & (runs.c.global_batch_size > 0) & (runs.c.batch_size > 0)
            & ((runs.c.workload_kind == "builtin") | runs.c.workload_kind.is_(None)))
    op.execute(runs.update().where(ours)
               .values(rounds_per_second=runs.c.throughput / runs.c.global_batch_size,
                       gradients_per_second=runs.c.throughput / runs.c.batch_size))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, _ in reversed(_COLUMNS):
            batch_op.drop_column(name)
