"""GPU runs: the data path a run asked for (``data_path``) and the one it used
(``data_path_used``), and the GPU facts of a run: its GPU model, how many GPUs it used, the
peak memory its busiest rank allocated (MB) and the mean utilisation (%) NVML saw; and
``host_load``, the threads per CPU on its most crowded host (above 1 its ranks shared cores:
what the figures' crowding note is decided by, whatever the site is called); and what the
study's model fit predicted the run would take (``predicted_seconds``, ``predicted_by_fit``),
which the run's wall time then checks.

Runs recorded before this revision ran on CPUs with no choice of path: ``data_path`` is
back-filled ``auto`` and ``data_path_used`` with the one path each algorithm then had (sync
and eager-SGD and the parameter server: MPI; ddp: torch.distributed over gloo; horovod:
Horovod's MPI; one rank: none). Their GPU facts stay null: they had none.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_COLUMNS = (("data_path", sa.String(length=32)), ("data_path_used", sa.String(length=64)),
            ("gpu_model", sa.String(length=128)), ("gpus", sa.Integer()),
            ("gpu_peak_memory_mb", sa.Float()), ("gpu_utilization", sa.Float()), ("host_load", sa.Float()),
            ("predicted_seconds", sa.Float()), ("predicted_by_fit", sa.Integer()))


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, kind in _COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
    runs = sa.table("runs", sa.column("data_path", sa.String()), sa.column("data_path_used", sa.String()),
                    sa.column("algorithm", sa.String()), sa.column("world_size", sa.Integer()),
                    sa.column("workload_kind", sa.String()))
    used = sa.case((runs.c.world_size == 1, "none"),
                   (runs.c.algorithm == "ddp", "torch_distributed:gloo"),
                   (runs.c.algorithm == "horovod", "horovod:mpi"), else_="mpi")
    op.execute(runs.update().values(data_path="auto"))
    op.execute(runs.update().where(sa.or_(runs.c.workload_kind.is_(None), runs.c.workload_kind != "command"))
               .values(data_path_used=used))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        for name, _ in reversed(_COLUMNS):
            batch_op.drop_column(name)
