"""The database's own facts: ``settings`` (name -> value), first ``database_id``, a random UUID made
once here, which keys the database's timeline event files (results_db/store/event_files.py:
``<database_id>/run-N.parquet``) so that two databases sharing one events folder
(``$SCALESTUDY_EVENTS_DIR``) never share a name.

Runs recorded before this revision keep the names they recorded (``run-N.parquet``, relative to the
events folder): they read as before.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""
import uuid

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    settings = op.create_table("settings",
                               sa.Column("name", sa.String(length=64), primary_key=True),
                               sa.Column("value", sa.Text(), nullable=False))
    op.bulk_insert(settings, [{"name": "database_id", "value": uuid.uuid4().hex}])


def downgrade() -> None:
    op.drop_table("settings")
