"""``model_fits``: performance models fitted to a study's runs (``scalestudy model fit``).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_fits",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("studies.id"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("terms", sa.JSON(), nullable=False),
        sa.Column("unfitted", sa.JSON(), nullable=False),
        sa.Column("run_ids", sa.JSON(), nullable=False),
        sa.Column("warmup", sa.Integer(), nullable=False),
    )
    op.create_index("ix_model_fits_study_id", "model_fits", ["study_id"])


def downgrade() -> None:
    op.drop_index("ix_model_fits_study_id", table_name="model_fits")
    op.drop_table("model_fits")
