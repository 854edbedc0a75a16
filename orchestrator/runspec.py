"""From a Hydra job config to a validated ``RunSpec`` and its ``run_key``.

Validation happens here, in the orchestrator, for every job of a sweep before the
first one is submitted: a bad value anywhere stops the whole sweep with one line
that names the field and the value.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from workloads.imbalance import KINDS as IMBALANCE_KINDS
from workloads.registry import ALGORITHM_DEVICES, ALGORITHMS, DATASETS, DEVICES, MODELS
from workloads.spec import RunSpec

from .errors import ConfigError
from .sites import SiteConfig, load_site

# Fields that describe the experiment; run_key hashes exactly these.
# (dataset_path is left out: the same data at another path is the same experiment.)
SEMANTIC_FIELDS = (
    "site", "nodes", "workers_per_node", "threads_per_node", "batch_size", "algorithm",
    "model", "dataset", "epochs", "steps_per_epoch", "lr", "momentum", "seed",
    "fusion_threshold_mb", "cycle_time_ms", "timeline", "device", "sync_every",
    "imbalance_kind", "imbalance_ranks", "imbalance_delay_ms", "imbalance_rank", "imbalance_sigma",
)


def _int(field: str, value: Any, minimum: int = 1, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, value, f"expected an integer >= {minimum}")
    if value < minimum:
        raise ConfigError(field, value, f"must be >= {minimum}")
    return value


def _float(field: str, value: Any, minimum: float = 0.0, strict: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, value, "expected a finite number")
    if value < minimum or (strict and value == minimum):
        raise ConfigError(field, value, f"must be {'>' if strict else '>='} {minimum}")
    return float(value)


def _choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(field, value, f"unknown {field}; known: {', '.join(choices)}")
    return value


def _bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(field, value, "expected true or false")
    return value


def _dataset(c: dict[str, Any], model: str) -> tuple[str, str | None]:
    node = c.get("dataset")
    if isinstance(node, str):  # a plain name, e.g. from a hand-written mapping
        node = {"name": node, "path": None}
    if not isinstance(node, dict):
        raise ConfigError("dataset", node, "expected a dataset (dataset=NAME, see conf/dataset/)")
    name = _choice("dataset.name", node.get("name"), tuple(DATASETS))
    kind, needs_path = DATASETS[name]
    path = node.get("path")
    if path is not None and not isinstance(path, str):
        raise ConfigError("dataset.path", path, "expected a folder path")
    if needs_path and not path:
        raise ConfigError("dataset.path", path, f"dataset {name} reads local files: set dataset.path=/folder")
    if MODELS[model] != kind:
        raise ConfigError("model", model, f"takes {MODELS[model]} inputs but dataset {name} holds {kind}s")
    return name, path


def _algorithm(c: dict[str, Any]) -> tuple[str, str]:
    algorithm = _choice("algorithm", c.get("algorithm"), ALGORITHMS)
    device = _choice("device", c.get("device", "cpu"), DEVICES)
    if device not in ALGORITHM_DEVICES[algorithm]:
        raise ConfigError("device", device, f"algorithm {algorithm} runs on {', '.join(ALGORITHM_DEVICES[algorithm])}")
    if algorithm == "horovod":
        import importlib.util

        if importlib.util.find_spec("horovod") is None:
            raise ConfigError("algorithm", algorithm, "needs Horovod (horovod.torch), not installed in this "
                              "environment; build it with `bash scripts/install-horovod.sh` or use algorithm=sync")
    return algorithm, device


def _imbalance(c: dict[str, Any], world_size: int, model: str, dataset: str) -> dict[str, Any]:
    node = c.get("imbalance") or {"kind": "none"}
    if not isinstance(node, dict):
        raise ConfigError("imbalance", node, "expected imbalance.kind=..., imbalance.delay_ms=...")
    unknown = sorted(set(node) - {"kind", "ranks", "delay_ms", "rank", "sigma"})
    if unknown:
        raise ConfigError(f"imbalance.{unknown[0]}", node[unknown[0]], "unknown key; known: kind, ranks, delay_ms, rank, sigma")
    kind = _choice("imbalance.kind", node.get("kind", "none"), IMBALANCE_KINDS)
    ranks = _int("imbalance.ranks", node.get("ranks", 1))
    if ranks > world_size and kind == "injected":
        raise ConfigError("imbalance.ranks", ranks, f"more than the run's {world_size} ranks")
    rank = node.get("rank", -1)
    if isinstance(rank, bool) or not isinstance(rank, int) or not -world_size <= rank < world_size:
        raise ConfigError("imbalance.rank", rank, f"expected a rank in [-{world_size}, {world_size})")
    if kind == "inherent" and (model != "lstm" or dataset != "sequences"):
        raise ConfigError("imbalance.kind", kind, "inherent imbalance is the lstm on variable-length sequences: "
                          "set model=lstm dataset=sequences")
    return {
        "imbalance_kind": kind,
        "imbalance_ranks": ranks,
        "imbalance_delay_ms": _float("imbalance.delay_ms", node.get("delay_ms", 0), strict=False),
        "imbalance_rank": rank,
        "imbalance_sigma": _float("imbalance.sigma", node.get("sigma", 1.0)),
    }


def _name(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value or not all(c.isalnum() or c in "-_." for c in value):
        raise ConfigError(field, value, "expected a name of letters, digits, '-', '_' or '.'")
    return value


def _plain(cfg: DictConfig) -> dict[str, Any]:
    """The job's own keys, resolved (the ``hydra`` node is left out: it needs a live job)."""
    out: dict[str, Any] = {}
    for key in cfg.keys():
        if key == "hydra":
            continue
        try:
            value = cfg[key]
        except MissingMandatoryValue:
            raise ConfigError(str(key), "???", "is required (set it on the command line or in the study)") from None
        except OmegaConfBaseException as exc:
            raise ConfigError(str(key), OmegaConf.to_container(cfg, resolve=False)[key], str(exc).splitlines()[0]) from None
        out[str(key)] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return out


def build_run_spec(cfg: DictConfig | Mapping[str, Any], site: SiteConfig | None = None) -> RunSpec:
    """Validate one job's config and return its spec; raises ``ConfigError``."""
    c = _plain(cfg) if isinstance(cfg, DictConfig) else dict(cfg)
    site = site or load_site(c.get("site"))
    nodes = _int("nodes", c.get("nodes"))
    if nodes > site.max_nodes:
        raise ConfigError("nodes", nodes, f"site {site.name} allows at most {site.max_nodes} nodes per run")
    workers = _int("workers_per_node", c.get("workers_per_node"))
    threads = _int("threads_per_node", c.get("threads_per_node"))
    if threads % workers:
        raise ConfigError(
            "threads_per_node", threads,
            f"must be a whole multiple of workers_per_node={workers} (each worker gets threads_per_node / workers_per_node threads)",
        )
    model = _choice("model", c.get("model"), tuple(MODELS))
    dataset, dataset_path = _dataset(c, model)
    algorithm, device = _algorithm(c)
    if algorithm == "async_ps" and nodes * workers < 2:
        raise ConfigError("algorithm", algorithm, "needs at least 2 ranks (a server and a worker); "
                          "raise nodes or workers_per_node")
    imbalance = _imbalance(c, nodes * workers, model, dataset)
    return RunSpec(
        study=_name("study_name", c.get("study_name")),
        site=site.name,
        nodes=nodes,
        workers_per_node=workers,
        threads_per_node=threads,
        batch_size=_int("batch_size", c.get("batch_size")),
        algorithm=algorithm,
        model=model,
        dataset=dataset,
        dataset_path=dataset_path,
        epochs=_int("epochs", c.get("epochs")),
        steps_per_epoch=_int("steps_per_epoch", c.get("steps_per_epoch"), optional=True),
        lr=_float("lr", c.get("lr")),
        momentum=_float("momentum", c.get("momentum"), strict=False),
        seed=_int("seed", c.get("seed"), minimum=0),
        fusion_threshold_mb=_float("fusion_threshold_mb", c.get("fusion_threshold_mb", 64), strict=False),
        cycle_time_ms=_float("cycle_time_ms", c.get("cycle_time_ms", 5)),
        timeline=_bool("timeline", c.get("timeline", False)),
        device=device,
        sync_every=_int("sync_every", c.get("sync_every", 10), minimum=0),
        **imbalance,
    )


def run_key(spec: RunSpec) -> str:
    """Stable identity of a run: same semantic config, same key (paths and times excluded)."""
    semantic = {name: getattr(spec, name) for name in SEMANTIC_FIELDS}
    blob = json.dumps(semantic, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
