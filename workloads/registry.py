"""Names the workload implements, and how a user's own model or data set is found.

Importable without torch: the orchestrator validates configs against these before
anything is submitted, so the built-in implementations are looked up lazily elsewhere.

A ``model`` or ``dataset`` that is not a built-in name is the user's: either an import
path ``package.module:callable``, or a short name an installed package registers in
the entry-point group ``scalestudy.models`` / ``scalestudy.datasets``::

    [project.entry-points."scalestudy.models"]
    tiny_transformer = "mypkg.nets:make_model"
"""

from __future__ import annotations

import importlib
import inspect
import re
from importlib import metadata
from typing import Any, Callable

from .catch_up import CATCH_UP
from .did_you_mean import hint

ALGORITHMS = ("sync", "ddp", "horovod", "eager_solo", "eager_majority", "async_ps")
DEVICES = ("cpu", "cuda")
EAGER_ALGORITHMS = ("eager_solo", "eager_majority")
# what an eager-SGD rank that missed rounds does (declared in workloads/catch_up.py)
EAGER_CATCH_UP = tuple(CATCH_UP)
# how gradients travel between ranks (workloads/comm/data_path.py); auto: the first the
# algorithm takes on its device (ALGORITHM_DATA_PATHS)
DATA_PATHS = ("auto", "mpi", "torch_distributed", "cuda_aware_mpi", "host_staging", "horovod")
# (algorithm, device) -> the data paths it can take, the first being what auto means:
# - sync moves its fused buffers through any path; on GPUs NCCL first, as Horovod and DDP do;
# - eager-SGD's partial collectives and the parameter server progress on the host, over MPI:
#   on GPUs their tensors are staged through pinned host buffers;
# - ddp is torch.distributed (gloo on CPU, nccl on CUDA); horovod brings its own (MPI, or NCCL
#   where it was built with it).
ALGORITHM_DATA_PATHS = {
    ("sync", "cpu"): ("mpi", "torch_distributed"),
    ("sync", "cuda"): ("torch_distributed", "cuda_aware_mpi", "host_staging"),
    ("ddp", "cpu"): ("torch_distributed",), ("ddp", "cuda"): ("torch_distributed",),
    ("horovod", "cpu"): ("horovod",), ("horovod", "cuda"): ("horovod",),
    ("async_ps", "cpu"): ("mpi",), ("async_ps", "cuda"): ("host_staging",),
    **{(a, d): (("mpi",) if d == "cpu" else ("host_staging",)) for a in EAGER_ALGORITHMS
       for d in DEVICES},
}
ALGORITHM_DEVICES = {a: DEVICES for a in ALGORITHMS}
# algorithms with a cycle time that autotune=true chooses (sync: ours; horovod: HOROVOD_AUTOTUNE)
TUNABLE_ALGORITHMS = ("sync", "horovod")
# what ``compute`` may be (workloads/emulation.py): real; emulated (slept, zero gradients, no
# accuracy); padded (computed for real, then held until the step lasted the profile's times)
COMPUTE_KINDS = ("real", "emulated", "padded")


def computes_for_real(compute: str) -> bool:
    """Whether a run of this ``compute`` computes real gradients, so that its evaluations (top-1,
    loss) mean something: real and padded, not emulated."""
    return compute in ("real", "padded")


IMBALANCE_KINDS = ("none", "injected", "fixed", "exponential", "lognormal", "shifted", "inherent")

# model -> the kind of input it takes ("regression": a flat feature vector with a float target)
MODELS = {"small_cnn": "image", "resnet20": "image", "resnet32": "image", "resnet50": "image", "nt3": "vector", "lstm": "sequence",
          "hyperplane_mlp": "regression"}
# dataset -> (kind of samples, needs dataset_path); a "regression" data set's targets are floats,
# scored by mean squared error (workloads/objective.py), and it has no classes (no top-1)
DATASETS = {
    "digits": ("image", False),
    "synthetic_images": ("image", False),
    "cifar10": ("image", True),
    "imagefolder": ("image", True),
    "nt3_synthetic": ("vector", False),
    "sequences": ("sequence", False),
    "hyperplane": ("regression", False),
}


def dataset_task(name: str) -> str:
    """``regression`` for a built-in data set of float targets (its loss is the mean squared
    error and it has no top-1), else ``classification`` (a user's data set's labels are classes)."""
    return "regression" if DATASETS.get(name, ("",))[0] == "regression" else "classification"
ENTRY_POINT_GROUPS = {"model": "scalestudy.models", "dataset": "scalestudy.datasets"}
IMPORT_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
# what a factory may ask for, by parameter name
FACTORY_ARGUMENTS = {"model": ("input_shape", "num_classes", "params", "seed"),
                     "dataset": ("params", "seed", "path")}


def resolve_data_path(algorithm: str, device: str, requested: str = "auto") -> str:
    """The data path a run of ``algorithm`` on ``device`` uses when ``requested`` is asked for;
    ``ValueError`` naming what it can take otherwise."""
    allowed = ALGORITHM_DATA_PATHS[(algorithm, device)]
    if requested == "auto":
        return allowed[0]
    if requested not in allowed:
        raise ValueError(f"algorithm {algorithm} on {device} moves gradients through "
                         f"{' or '.join(allowed)}" + (" (auto picks it)" if len(allowed) == 1 else
                                                      f" (auto: {allowed[0]})"))
    return requested


class FactoryError(ValueError):
    """A user's model or dataset cannot be found or called."""


def is_builtin(kind: str, name: str) -> bool:
    return name in (MODELS if kind == "model" else DATASETS)


def registered(kind: str) -> dict[str, str]:
    """Short names installed packages register for ``kind``, with their import paths."""
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUPS[kind])
    except Exception:  # a broken distribution's metadata must not break every sweep
        return {}
    return {ep.name: ep.value for ep in eps}


def import_path(kind: str, name: str) -> str:
    """``pkg.mod:callable`` for a user's ``kind`` named ``name`` (an import path or a registered name)."""
    if IMPORT_PATH_RE.match(name):
        return name
    short = registered(kind)
    if name in short:
        return short[name]
    known = sorted((MODELS if kind == "model" else DATASETS)) + sorted(short)
    raise FactoryError(f"unknown {kind}{hint(name, known)}; known: {', '.join(known)}, or an import path "
                       "package.module:callable")


def load_factory(kind: str, name: str) -> Callable[..., Any]:
    """Import the user's factory; errors say what to fix in one line."""
    path = import_path(kind, name)
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module itself raising
        raise FactoryError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc} "
                           "(is the package installed, or on PYTHONPATH, here and on the compute nodes?)") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise FactoryError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise FactoryError(f"{path} is a {type(obj).__name__}, not a callable")
    return obj


def call_factory(kind: str, factory: Callable[..., Any], available: dict[str, Any]) -> Any:
    """Call ``factory`` with the arguments it names among ``FACTORY_ARGUMENTS[kind]``
    (all of them if it takes ``**kwargs``)."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return factory(**available)
    params = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return factory(**available)
    unknown = [n for n, p in params.items() if n not in available and p.default is inspect.Parameter.empty
               and p.kind not in (inspect.Parameter.VAR_POSITIONAL,)]
    if unknown:
        raise FactoryError(f"{kind} factory {getattr(factory, '__qualname__', factory)} asks for {', '.join(unknown)}; "
                           f"a {kind} factory may take {', '.join(FACTORY_ARGUMENTS[kind])}")
    return factory(**{n: available[n] for n in params if n in available})
