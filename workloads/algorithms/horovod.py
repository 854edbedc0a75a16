"""``horovod``: the real Horovod (``horovod.torch``), when it is installed.

Horovod 0.28.1 is unmaintained and ships only as an sdist that must be patched to
build against current torch (``scripts/install-horovod.sh``); scalestudy does not
depend on it. Its fusion threshold and cycle time come from the same spec fields
as ``sync``'s, through Horovod's environment variables.
"""

from __future__ import annotations

import os
from pathlib import Path

from mpi4py import MPI
from torch import nn

from .base import GradientSync, SyncOptions

AUTOTUNE_LOG = "horovod-autotune.csv"
INSTALL_HINT = ("algorithm=horovod needs horovod.torch, which is not importable here; build it with "
                "`bash scripts/install-horovod.sh` (a few minutes), or use algorithm=sync, "
                "scalestudy's own Horovod-style engine")


# the user's own log path, as the process started: a path this module set for one run must
# not carry over to the next run in the same process
_USER_AUTOTUNE_LOG = os.environ.get("HOROVOD_AUTOTUNE_LOG") or None


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def import_horovod():
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise RuntimeError(f"{INSTALL_HINT} ({exc})") from None
    return hvd


class HorovodReference(GradientSync):
    def __init__(self, model: nn.Module, comm: MPI.Comm, options: SyncOptions) -> None:
        super().__init__(model, comm, options)
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(options.fusion_threshold_mb * 1024 * 1024))
        os.environ["HOROVOD_CYCLE_TIME"] = str(options.cycle_time_ms)
        if options.autotune:   # Horovod's own: Bayesian search over cycle time, fusion threshold, ...
            os.environ["HOROVOD_AUTOTUNE"] = "1"
            # rank 0's Horovod writes every scored sample (cycle time, fusion threshold, score)
            # to the run folder: the choice it made is the run's record, as sync's is in its metrics
            log = _USER_AUTOTUNE_LOG or (str(Path(options.run_dir) / AUTOTUNE_LOG) if options.run_dir else None)
            _set_env("HOROVOD_AUTOTUNE_LOG", log)
        else:
            os.environ.pop("HOROVOD_AUTOTUNE", None)
            _set_env("HOROVOD_AUTOTUNE_LOG", _USER_AUTOTUNE_LOG)
        self.hvd = import_horovod()
        if options.device == "cuda" and not self.hvd.nccl_built():
            raise RuntimeError("algorithm=horovod on device=cuda needs Horovod built with NCCL "
                               "(HOROVOD_GPU_OPERATIONS=NCCL); this one moves CUDA tensors no other way we support")
        self.hvd.init()
        if self.hvd.size() != comm.Get_size():
            raise RuntimeError(f"Horovod sees {self.hvd.size()} ranks, MPI {comm.Get_size()}")

    @property
    def data_path_label(self) -> str:
        return "horovod:nccl" if self.options.device == "cuda" else "horovod:mpi"

    def broadcast_parameters(self, root: int = 0) -> None:
        self.hvd.broadcast_parameters(self.model.state_dict(), root_rank=root)

    def set_optimizer(self, optimizer) -> None:
        self.optimizer = self.hvd.DistributedOptimizer(optimizer, named_parameters=self.model.named_parameters())

    def zero_grad(self) -> None:
        # Horovod's wrapper takes no set_to_none argument (and checks no allreduce is in flight)
        self.optimizer.zero_grad()

    def synchronize(self) -> None:
        self.optimizer.synchronize()

    def step(self) -> None:
        with self.optimizer.skip_synchronize():
            self.optimizer.step()
