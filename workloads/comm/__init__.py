"""Communication engines built on mpi4py: tensor fusion and the Horovod-style background loop."""

from .fusion import FusionBuffer, plan_fusion
from .fused_allreduce import FusedAllreduce
from .background import BackgroundAllreduce, require_thread_multiple

__all__ = ["FusionBuffer", "plan_fusion", "FusedAllreduce", "BackgroundAllreduce", "require_thread_multiple"]
