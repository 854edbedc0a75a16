"""Where a rank sits: its rank and local rank from the launcher, and the GPU it owns.

Read from the launcher's environment before MPI or CUDA start, by both rank programs
(``python -m workloads`` and the command wrapper ``python -m workloads.command``), so
that a user's unmodified GPU program gets the same one-GPU-per-rank binding as the
built-in loop. Needs neither torch nor MPI.

The GPU of a rank follows its site's documented rule (``RunSpec.gpu_binding``):

- ``reverse`` (ALCF Polaris, ``set_affinity_gpu_polaris.sh``): ``CUDA_VISIBLE_DEVICES =
  n - 1 - local_rank % n``, "in reverse order due to topology": cores 0-7 sit next to GPU 3;
  NERSC Perlmutter likewise (its tutorials' ``CUDA_VISIBLE_DEVICES=3,2,1,0`` "to match default
  CPU affinities from Slurm").
- ``direct`` (a workstation): ``local_rank % n``.
- ``none``: nothing set; the rank sees what the launcher gave it.
"""

from __future__ import annotations

import os
from typing import Mapping

# the rank variable of each launcher: MPICH/Hydra and srun's PMI, srun, Cray PALS, aprun, Open MPI, PMIx
RANK_VARS = ("PMI_RANK", "SLURM_PROCID", "PALS_RANKID", "ALPS_APP_PE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
GPU_BINDINGS = ("none", "direct", "reverse")
VISIBLE = "CUDA_VISIBLE_DEVICES"


def _first_int(names: tuple[str, ...], env: Mapping[str, str]) -> int | None:
    for name in names:
        value = env.get(name, "")
        if value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def launcher_ranks(world_size: int, workers_per_node: int, env: Mapping[str, str]) -> tuple[int, int, int]:
    """(rank, local rank, ranks per node): the rank from the MPI launcher's environment; the
    node-local index from the run's layout, since every launcher scalestudy drives places
    ``workers_per_node`` consecutive ranks on each node (``-ppn``, ``--ntasks-per-node``,
    ``-N``). The launchers' own local ids would disagree on the local site, where every
    virtual node is this one host."""
    rank = _first_int(RANK_VARS, env)
    if rank is None:
        if world_size > 1:
            raise RuntimeError(f"cannot tell this process's rank: none of {', '.join(RANK_VARS)} is set "
                               "(start the command through an MPI launcher)")
        rank = 0
    return rank, rank % workers_per_node, workers_per_node


def gpu_of(binding: str, local_rank: int, gpus_per_node: int) -> int | None:
    """The GPU index a rank with this local rank owns, or None where the binding sets none."""
    if binding in ("", "none") or gpus_per_node < 1:
        return None
    if binding == "reverse":
        return gpus_per_node - 1 - local_rank % gpus_per_node
    if binding == "direct":
        return local_rank % gpus_per_node
    raise ValueError(f"gpu_binding={binding!r}: expected one of {', '.join(repr(b) for b in GPU_BINDINGS)}")


def gpu_rule(binding: str, gpus_per_node: int) -> str:
    """The binding in words, for a dry run: which GPU the k-th rank of a node owns."""
    if binding == "reverse":
        return f"{gpus_per_node - 1} - k % {gpus_per_node}"
    if binding == "direct":
        return f"k % {gpus_per_node}"
    return "as the launcher gives it"


def bind_gpu(binding: str, gpus_per_node: int, world_size: int, workers_per_node: int,
             env: dict[str, str] | None = None) -> str | None:
    """Set ``CUDA_VISIBLE_DEVICES`` in ``env`` (default: this process's) to this rank's GPU
    before anything starts CUDA; returns what it set, or None where nothing is bound.

    Where the launcher already lists the node's GPUs (Slurm's ``--gpus-per-node`` sets
    ``CUDA_VISIBLE_DEVICES=0,1,2,3`` in every task), the rank takes its own among them; a
    single GPU already named (a user's choice, ``--gpus-per-task``) is kept."""
    env = os.environ if env is None else env
    if binding in ("", "none"):
        return None
    given = [d for d in env.get(VISIBLE, "").split(",") if d.strip()]
    if len(given) == 1:
        return None
    _, local, _ = launcher_ranks(world_size, workers_per_node, env)
    gpu = gpu_of(binding, local, len(given) if given else gpus_per_node)
    if gpu is None:
        return None
    env[VISIBLE] = given[gpu].strip() if given else str(gpu)
    return env[VISIBLE]


def host_gpus(binding: str, gpus_per_node: int, workers_per_node: int, env: dict[str, str]) -> str | None:
    """The GPUs all this host's ranks are bound to, in ``CUDA_VISIBLE_DEVICES`` form (what
    the host's energy reader counts), from the node's listing in ``env`` before binding; None
    where the binding leaves the listing as it is (the reader then counts what it lists)."""
    given = [d.strip() for d in env.get(VISIBLE, "").split(",") if d.strip()]
    if binding in ("", "none") or len(given) == 1:
        return None
    gpus = [gpu_of(binding, local, len(given) if given else gpus_per_node) for local in range(workers_per_node)]
    return ",".join(dict.fromkeys(given[g] if given else str(g) for g in gpus if g is not None)) or None


def visible_gpus() -> int:
    """GPUs the driver shows this host (``/proc/driver/nvidia/gpus``), without CUDA or NVML:
    0 where there is no NVIDIA driver. For a command workload, which has no torch."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


NVIDIA_GPUS = "/proc/driver/nvidia/gpus"


def _driver_gpus(root: str) -> list[dict[str, str]]:
    """The driver's GPUs (``<root>/<bus id>/information``: Model, GPU UUID, Bus Location), in PCI
    bus order, as nvidia-smi numbers them."""
    out = []
    try:
        buses = sorted(os.listdir(root))
    except OSError:
        return []
    for bus in buses:
        try:
            text = open(os.path.join(root, bus, "information")).read()
        except OSError:
            continue
        fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in text.splitlines()))
        out.append({"name": fields.get("Model", ""), "uuid": fields.get("GPU UUID", ""),
                    "pci_bus_id": fields.get("Bus Location", bus)})
    return out


def listed_gpu(env: Mapping[str, str], root: str = NVIDIA_GPUS) -> dict[str, str | None] | None:
    """The GPU a command rank was given, torch-free, for its ``run_start``: where
    ``CUDA_VISIBLE_DEVICES`` names exactly one device, its ``visible`` name, and the driver's model
    name, UUID and PCI bus id where they are certain (a UUID named, or ``CUDA_DEVICE_ORDER=PCI_BUS_ID``;
    CUDA's default order is fastest first, so an index is matched to the driver's list only by
    order of bus; the model name alone also where every GPU of the host is one model). None where
    several or no devices are listed: which one the program uses is its own choice."""
    listed = [d.strip() for d in env.get(VISIBLE, "").split(",") if d.strip()]
    if len(listed) != 1:
        return None
    token = listed[0]
    facts: dict[str, str | None] = {"visible": token, "name": None, "uuid": None, "pci_bus_id": None}
    gpus = _driver_gpus(root)
    match = None
    if token.startswith("GPU-"):
        match = next((g for g in gpus if g["uuid"] == token), None)
    elif token.isdigit() and env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" and int(token) < len(gpus):
        match = gpus[int(token)]
    if match:
        facts.update({"name": match["name"] or None, "uuid": match["uuid"] or None,
                      "pci_bus_id": match["pci_bus_id"] or None})
    elif len({g["name"] for g in gpus}) == 1:
        facts["name"] = gpus[0]["name"] or None
    return facts


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def listed_threads(env: Mapping[str, str], default: int) -> int:
    """The threads a command rank's program is told to run: the first of ``THREAD_VARS`` set to a
    positive count (OpenMP's list form ``4,2`` gives its outer level, 4), else ``default``."""
    for name in THREAD_VARS:
        first = env.get(name, "").split(",")[0].strip()
        if first.isdigit() and int(first) > 0:
            return int(first)
    return default
