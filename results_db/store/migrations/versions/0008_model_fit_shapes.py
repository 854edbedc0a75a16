"""``model_fits.workloads`` (what each algorithm's runs measured, which a prediction needs
beside the fitted terms: gradient bytes and collectives per step, the hidden share, the
injection) and ``model_fits.bootstrap`` (the terms refitted on resampled steps, for the
prediction's uncertainty band). Fits stored before this revision have neither: predict
asks for a new ``model fit``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_fits") as batch_op:
        batch_op.add_column(sa.Column("workloads", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("bootstrap", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_fits") as batch_op:
        batch_op.drop_column("bootstrap")
        batch_op.drop_column("workloads")
