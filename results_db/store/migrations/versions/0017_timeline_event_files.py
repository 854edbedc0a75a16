"""A timeline kept as a columnar file: ``events_file``, the run's Parquet file of timeline events
(results_db/store/event_files.py), named relative to the database's events folder.

Runs recorded before this revision keep their events in the ``events`` table: null, what that means.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("events_file", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("events_file")
