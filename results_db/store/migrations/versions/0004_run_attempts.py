"""Every attempt at a run keeps its own row: ``attempt`` (1, 2, ...) and ``latest``.

A rerun, or a retry after a crash, a timeout or a lost node, used to overwrite the
run's row and delete its measurements. Now the earlier attempt stays (``latest`` false)
and the next one is a new row; a run is unique per (study, run_key, attempt).
Existing rows become attempt 1, latest.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# 0001 created the (study_id, run_key) constraint without a name: PostgreSQL named it
# itself; SQLite reflects it without one, so batch mode gives it this name to drop it by.
_SQLITE_NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s_%(column_1_name)s"}
_OLD_UNIQUE = {"postgresql": "runs_study_id_run_key_key", "sqlite": "uq_runs_study_id_run_key"}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    naming = _SQLITE_NAMING if dialect == "sqlite" else None
    with op.batch_alter_table("runs", naming_convention=naming) as batch_op:
        batch_op.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default=sa.text("1")))
        batch_op.add_column(sa.Column("latest", sa.Boolean(), nullable=False, server_default=sa.true()))
        batch_op.drop_constraint(_OLD_UNIQUE.get(dialect, "runs_study_id_run_key_key"), type_="unique")
        batch_op.create_unique_constraint("uq_runs_study_run_attempt", ["study_id", "run_key", "attempt"])


def downgrade() -> None:
    # earlier attempts cannot be kept under the old (study_id, run_key) constraint
    runs = sa.table("runs", sa.column("id", sa.Integer()), sa.column("latest", sa.Boolean()))
    earlier = sa.select(runs.c.id).where(runs.c.latest == sa.false())
    for name in ("steps", "evals", "rank_summaries", "events", "step_stats", "rounds"):
        table = sa.table(name, sa.column("run_id", sa.Integer()))
        op.execute(table.delete().where(table.c.run_id.in_(earlier)))
    op.execute(runs.delete().where(runs.c.latest == sa.false()))
    dialect = op.get_bind().dialect.name
    naming = _SQLITE_NAMING if dialect == "sqlite" else None
    # named as upgrade() finds it, so that upgrading again drops it (batch mode on SQLite
    # refuses an unnamed constraint: this downgrade failed there until a test walked it)
    with op.batch_alter_table("runs", naming_convention=naming) as batch_op:
        batch_op.drop_constraint("uq_runs_study_run_attempt", type_="unique")
        batch_op.create_unique_constraint(_OLD_UNIQUE.get(dialect, "runs_study_id_run_key_key"), ["study_id", "run_key"])
        batch_op.drop_column("latest")
        batch_op.drop_column("attempt")
