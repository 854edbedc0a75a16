"""The energy of a run, where its nodes expose a counter (``workloads/energy.py``): joules
over the run (``energy_joules``, all its hosts), mean watts per host (``energy_watts``), the
counter read (``energy_source``: pm_counters, rapl, nvml), whether it was measured
(``energy_kind``: always ``measured`` today; an estimate would say so) and, where the
energy is missing although a counter was there, why (``energy_note``).

Runs recorded before this revision have no energy: null, never 0.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_COLUMNS = (("energy_joules", sa.Float()), ("energy_watts", sa.Float()), ("energy_source", sa.String(length=64)),
            ("energy_kind", sa.String(length=16)), ("energy_note", sa.Text()))


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, kind in _COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, _ in reversed(_COLUMNS):
            batch_op.drop_column(name)
