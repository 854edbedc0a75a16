"""The network NCCL used in a GPU run (``nccl_network``: "AWS Libfabric", or "Socket" for its
TCP fallback, as NCCL's own log says; ``workloads/nccl_network.py``) and the network plugin
the run's site declares (``nccl_plugin``), so that a run that fell back to sockets on a site
with a plugin is flagged (``scalestudy status``, the report).

Runs recorded before this revision did not record it: null.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_COLUMNS = (("nccl_network", sa.String(length=128)), ("nccl_plugin", sa.String(length=64)))


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, kind in _COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, _ in reversed(_COLUMNS):
            batch_op.drop_column(name)
