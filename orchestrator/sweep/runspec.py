"""From a Hydra job config to a validated ``RunSpec`` and its ``run_key``.

Validation happens here, in the orchestrator, for every job of a sweep before the
first one is submitted: a bad value anywhere stops the whole sweep with one line
that names the field and the value. The user's own model, data set and command are
checked here too (the factory imports, the program exists, the patterns compile), so
that a typo fails on the login node, not in a batch job.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import shutil
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from workloads.output_metrics import REDUCERS, MetricPattern
from workloads.registry import (ALGORITHMS, COMPUTE_KINDS, DATA_PATHS, DATASETS, DEVICES, EAGER_ALGORITHMS,
                                EAGER_CATCH_UP, IMBALANCE_KINDS, MODELS,
                                TUNABLE_ALGORITHMS, FactoryError, is_builtin, load_factory, resolve_data_path)
from workloads.spec import FIELD, FIELDS, RunSpec

from ..errors import ConfigError
from ..site.config import SiteConfig, load_site
from .schema import check_known_keys
from workloads.did_you_mean import hint

WORKLOAD_KINDS = ("builtin", "command")
PARAM_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
METRIC_NAME_RE = PARAM_NAME_RE
# result columns a command's metrics may fill; any other name is stored under ``metrics``
HEADLINE_METRICS = ("throughput",)


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


def _timeline_sample(timeline: Any, steps: Any, ranks: Any) -> dict[str, Any]:
    """``timeline_steps`` (FIRST-LAST, or empty) and ``timeline_ranks`` (>= 0), only with a timeline."""
    text = "" if steps is None else str(steps).strip()
    if text and not re.fullmatch(r"\d+-\d+", text):
        raise ConfigError("timeline_steps", steps, "expected FIRST-LAST, e.g. 100-119 (steps from 0), or empty")
    if text:
        first, last = (int(x) for x in text.split("-"))
        if first > last:
            raise ConfigError("timeline_steps", steps, "the first step comes after the last")
    count = _int("timeline_ranks", 0 if ranks is None else ranks, minimum=0)
    if (text or count) and not _bool("timeline", timeline):
        raise ConfigError("timeline_steps" if text else "timeline_ranks", steps if text else ranks,
                          "samples a timeline: set timeline=true too")
    return {"timeline_steps": text, "timeline_ranks": count}


def _choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(field, value, f"unknown {field}{hint(value, choices)}; known: {', '.join(choices)}")
    return value


def _bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(field, value, "expected true or false")
    return value


def _seed_per_repeat(value: Any, repeat: int, workload_kind: str) -> bool:
    """Whether repeats vary the seed; kept at its default where it changes nothing (the first
    repeat trains with ``seed`` either way; a command workload reads no seed of ours), so that
    such a run has one key whatever was set."""
    vary = _bool("seed_per_repeat", value)
    return vary if repeat > 0 and workload_kind == "builtin" else FIELD["seed_per_repeat"].default


def _autotune(value: Any, algorithm: str) -> bool:
    """Only engines with a cycle time tune one; asking another to is a mistake worth a stop."""
    tune = _bool("autotune", value)
    if tune and algorithm not in TUNABLE_ALGORITHMS:
        raise ConfigError("autotune", value, f"tunes the cycle time of {' and '.join(TUNABLE_ALGORITHMS)}; "
                          f"algorithm={algorithm} has none")
    return tune


def _user_factory(kind: str, name: Any) -> str:
    """A user's model or dataset: it must import and name a callable, here, before submission."""
    if not isinstance(name, str) or not name:
        raise ConfigError(kind, name, f"expected a {kind} name or an import path package.module:callable")
    try:
        load_factory(kind, name)
    except FactoryError as exc:
        raise ConfigError(kind, name, str(exc)) from None
    return name


def _model_and_dataset(c: dict[str, Any]) -> tuple[str, str, str | None]:
    model, dataset = c.get("model", FIELD["model"].default), c.get("dataset", FIELD["dataset"].default)
    if isinstance(dataset, dict):
        raise ConfigError("dataset", dataset, "expected a name (dataset=NAME, and dataset_path=/folder for local files)")
    model = model if isinstance(model, str) and is_builtin("model", model) else _user_factory("model", model)
    dataset = dataset if isinstance(dataset, str) and is_builtin("dataset", dataset) else _user_factory("dataset", dataset)
    path = c.get("dataset_path")
    if path is not None and not isinstance(path, str):
        raise ConfigError("dataset_path", path, "expected a folder path")
    if dataset in DATASETS:
        kind, needs_path = DATASETS[dataset]
        if needs_path and not path:
            raise ConfigError("dataset_path", path, f"dataset {dataset} reads local files: set dataset_path=/folder")
        if model in MODELS and MODELS[model] != kind:
            raise ConfigError("model", model, f"takes {MODELS[model]} inputs but dataset {dataset} holds {kind}s")
    return model, dataset, path


def _algorithm(c: dict[str, Any]) -> str:
    algorithm = _choice("algorithm", c.get("algorithm", FIELD["algorithm"].default), ALGORITHMS)
    if algorithm == "horovod":
        import importlib.util

        if importlib.util.find_spec("horovod") is None:
            raise ConfigError("algorithm", algorithm, "needs Horovod (horovod.torch), not installed in this "
                              "environment; build it with `bash scripts/install-horovod.sh` or use algorithm=sync")
    return algorithm


def _device(c: dict[str, Any], site: SiteConfig, algorithm: str, workers: int, workload_kind: str) -> dict[str, Any]:
    """The run's device (``auto``: the site's GPUs where it declares some), its data path, and
    the site's GPU binding: one rank per GPU, so a node runs at most its GPUs' worth of ranks."""
    device = c.get("device", "auto")
    if device == "auto":
        device = "cuda" if site.accelerators_per_node else "cpu"
    device = _choice("device", device, DEVICES)
    if device == "cuda" and not site.accelerators_per_node:
        raise ConfigError("device", device, f"site {site.name} declares no GPUs (accelerators_per_node: 0); use a GPU "
                          "site (polaris, perlmutter_gpu, local_gpu, or your own) or device=cpu")
    if device == "cuda" and workers > site.accelerators_per_node:
        raise ConfigError("workers_per_node", workers, f"device=cuda runs one rank per GPU: workers_per_node={workers} "
                          f"is more than a site {site.name} node's {site.accelerators_per_node} GPU(s) "
                          f"(accelerators_per_node: {site.accelerators_per_node})")
    requested = _choice("data_path", c.get("data_path", FIELD["data_path"].default), DATA_PATHS)
    if workload_kind != "builtin" and requested != "auto":
        raise ConfigError("data_path", requested, "chooses how our training loop moves gradients; a command "
                          "workload moves its own")
    if workload_kind == "builtin":
        try:
            resolve_data_path(algorithm, device, requested)
        except ValueError as exc:
            raise ConfigError("data_path", requested, str(exc)) from None
        if algorithm == "horovod" and device == "cuda":
            _horovod_has_nccl()
    cuda = device == "cuda"
    return {"device": device, "data_path": requested, "gpu_binding": site.gpu_binding if cuda else "none",
            "gpus_per_node": site.accelerators_per_node if cuda else 0}


def _horovod_has_nccl() -> None:
    """Horovod moves CUDA tensors with NCCL only where it was built with it
    (``HOROVOD_GPU_OPERATIONS=NCCL``); without, say so here rather than in a batch job."""
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise ConfigError("algorithm", "horovod", f"horovod.torch does not import here ({exc})") from None
    if not hvd.nccl_built():
        raise ConfigError("device", "cuda", "algorithm=horovod on GPUs needs Horovod built with NCCL "
                          "(HOROVOD_GPU_OPERATIONS=NCCL; scripts/install-horovod.sh builds a CPU one); use "
                          "algorithm=sync (data_path=torch_distributed: NCCL) or ddp")


def _imbalance(c: dict[str, Any], world_size: int, model: str, dataset: str) -> dict[str, Any]:
    node = c.get("imbalance") or {"kind": "none"}
    if not isinstance(node, dict):
        raise ConfigError("imbalance", node, "expected imbalance.kind=..., imbalance.delay_ms=...")
    known = [f.config.split(".", 1)[1] for f in FIELDS if f.config and f.config.startswith("imbalance.")]
    unknown = sorted(set(node) - set(known))
    if unknown:
        raise ConfigError(f"imbalance.{unknown[0]}", node[unknown[0]], f"unknown key; known: {', '.join(known)}")
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


def _compute(c: dict[str, Any], workload_kind: str, **run: Any) -> dict[str, Any]:
    """``compute`` and its profile; the profile is read here, so a bad one fails on the login
    node, and must come from a run of the same model, batch and threads per rank (its times
    are theirs). ``emulated`` sleeps the profile's times; ``padded`` computes and is held to them."""
    kind = _choice("compute", c.get("compute", FIELD["compute"].default), COMPUTE_KINDS)
    profile = c.get("compute_profile")
    if kind == "real":
        if profile is not None:
            raise ConfigError("compute_profile", profile, "is used only with compute=emulated or compute=padded")
        return {"compute": kind, "compute_profile": None}
    if workload_kind != "builtin":
        raise ConfigError("compute", kind, f"{'emulates' if kind == 'emulated' else 'pads'} our training loop's "
                          "compute; a command workload runs its own")
    if not isinstance(profile, str) or not profile:
        raise ConfigError("compute_profile", profile, f"compute={kind} needs a profile file "
                          "(make one from a real run: scalestudy profile RUN_ID -o FILE) or a shipped one's name")
    from workloads.emulation import ComputeProfile, shipped_profile

    profile = str(shipped_profile(profile) or profile)
    try:
        loaded = ComputeProfile.load(profile)
    except ValueError as exc:
        raise ConfigError("compute_profile", profile, str(exc).split(": ", 1)[-1]) from None
    differ = [f"{k}={loaded.source[k]!r} (this run: {v!r})" for k, v in run.items()
              if k in loaded.source and loaded.source[k] != v]
    if differ:
        raise ConfigError("compute_profile", profile, "was recorded with " + ", ".join(differ)
                          + "; profile a run of the same configuration")
    return {"compute": kind, "compute_profile": str(Path(profile).resolve())}


def _params(value: Any) -> dict[str, Any]:
    if value in (None, {}):
        return {}
    if not isinstance(value, dict):
        raise ConfigError("params", value, "expected a mapping of free parameters (+params.NAME=VALUE)")
    for name, v in value.items():
        if not isinstance(name, str) or not PARAM_NAME_RE.match(name):
            raise ConfigError(f"params.{name}", v, "a parameter name is letters, digits and '_'")
        scalar = (str, int, float, bool)
        ok = isinstance(v, scalar) or (isinstance(v, list) and all(isinstance(x, scalar) for x in v))
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ConfigError(f"params.{name}", v, "expected a number, string, boolean, or a list of them")
    return dict(sorted(value.items()))


def _command(node: dict[str, Any]) -> tuple[str, ...]:
    command, shell = node.get("command"), node.get("shell", False)
    _bool("workload.shell", shell)
    if shell:
        if not isinstance(command, str) or not command.strip():
            raise ConfigError("workload.command", command, "with workload.shell=true, expected one command string")
        return ("/bin/sh", "-c", command)
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ConfigError("workload.command", command, f"cannot split into arguments: {exc}") from None
    elif isinstance(command, (list, tuple)) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                                    for a in command):
        argv = [str(a) for a in command]
    else:
        raise ConfigError("workload.command", command, "expected the program and its arguments, as a list or a string")
    if not argv or not argv[0]:
        raise ConfigError("workload.command", command, "is empty: workload.kind=command needs a program to run")
    if any("\0" in a or "\n" in a for a in argv):
        raise ConfigError("workload.command", command, "arguments may not hold newlines or NUL bytes")
    return tuple(argv)


def _check_program(argv: tuple[str, ...]) -> None:
    """The program must exist here when given as a path; a bare name must be on this PATH."""
    program = argv[0]
    if "/" in program:
        path = Path(program).expanduser()
        if not path.is_file():
            raise ConfigError("workload.command", program, f"no such program ({path.absolute()})")
        if not path.stat().st_mode & 0o111:
            raise ConfigError("workload.command", program, "is not executable (chmod +x, or run it with its "
                              "interpreter: [bash, script.sh])")
    elif shutil.which(program) is None:
        raise ConfigError("workload.command", program, "not found on this host's PATH (give a path, or set "
                          "workload.check_command=false if it exists only on the compute nodes)")


def _metric_patterns(value: Any) -> dict[str, dict[str, Any]]:
    from results_db.store.columns import RUN_COLUMNS

    if value in (None, {}):
        return {}
    if not isinstance(value, dict):
        raise ConfigError("workload.metrics", value, "expected NAME: {pattern: REGEX, reduce: last, ...}")
    out = {}
    for name, spec in value.items():
        where = f"workload.metrics.{name}"
        if not isinstance(name, str) or not METRIC_NAME_RE.match(name):
            raise ConfigError(where, spec, "a metric name is letters, digits and '_'")
        if name in RUN_COLUMNS and name not in HEADLINE_METRICS:
            raise ConfigError(where, spec, f"{name!r} is a built-in run column; choose another name")
        if isinstance(spec, str):
            spec = {"pattern": spec}
        if not isinstance(spec, dict):
            raise ConfigError(where, spec, "expected {pattern: REGEX, reduce: ..., ranks: ..., required: ...}")
        try:
            metric = MetricPattern.from_dict(name, spec)
        except ValueError as exc:
            raise ConfigError(where, spec, str(exc)) from None
        out[name] = metric.to_dict()
    return out


def _workload(c: dict[str, Any]) -> dict[str, Any]:
    node = c.get("workload") or {}
    if not isinstance(node, dict):
        raise ConfigError("workload", node, "expected workload.kind=builtin|command, workload.command=[...]")
    kind = _choice("workload.kind", node.get("kind", "builtin"), WORKLOAD_KINDS)
    if kind == "builtin":
        if node.get("command") not in (None, "", []) or node.get("metrics"):
            raise ConfigError("workload.kind", kind, "workload.command and workload.metrics need workload.kind=command")
        return {"workload_kind": kind, "command": (), "metric_patterns": {}}
    argv = _command(node)
    if _bool("workload.check_command", node.get("check_command", True)):
        _check_program(argv)
    return {"workload_kind": kind, "command": argv, "metric_patterns": _metric_patterns(node.get("metrics"))}


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
            out[str(key)] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except MissingMandatoryValue:
            raise ConfigError(str(key), "???", "is required (set it on the command line or in the study)") from None
        except OmegaConfBaseException as exc:
            raise ConfigError(str(key), OmegaConf.to_container(cfg, resolve=False)[key], str(exc).splitlines()[0]) from None
    return out


def build_run_spec(cfg: DictConfig | Mapping[str, Any], site: SiteConfig | None = None) -> RunSpec:
    """Validate one job's config and return its spec; raises ``ConfigError``."""
    c = _plain(cfg) if isinstance(cfg, DictConfig) else dict(cfg)
    check_known_keys(c)
    site = site or load_site(c.get("site", FIELD["site"].default))
    d = lambda name: c.get(FIELD[name].config, FIELD[name].default)  # noqa: E731
    catch_up = _choice("eager_catch_up", d("eager_catch_up"), EAGER_CATCH_UP)
    nodes = _int("nodes", d("nodes"))
    if nodes > site.max_nodes:
        raise ConfigError("nodes", nodes, f"site {site.name} allows at most {site.max_nodes} nodes per run")
    workers = _int("workers_per_node", d("workers_per_node"))
    threads = _int("threads_per_node", c.get("threads_per_node", workers))
    if threads % workers:
        raise ConfigError(
            "threads_per_node", threads,
            f"must be a whole multiple of workers_per_node={workers} (each worker gets threads_per_node / workers_per_node threads)",
        )
    workload = _workload(c)
    model, dataset, dataset_path = _model_and_dataset(c)
    algorithm = _algorithm(c)
    placement = _device(c, site, algorithm, workers, workload["workload_kind"])
    if algorithm == "async_ps" and nodes * workers < 2 and workload["workload_kind"] == "builtin":
        raise ConfigError("algorithm", algorithm, "needs at least 2 ranks (a server and a worker); "
                          "raise nodes or workers_per_node")
    imbalance = _imbalance(c, nodes * workers, model, dataset)
    run_timeout = c.get("run_timeout")
    return RunSpec(
        study=_name("study_name", c.get("study_name")),
        site=site.name,
        nodes=nodes,
        workers_per_node=workers,
        threads_per_node=threads,
        batch_size=_int("batch_size", d("batch_size")),
        algorithm=algorithm,
        model=model,
        dataset=dataset,
        dataset_path=dataset_path,
        epochs=_int("epochs", d("epochs")),
        steps_per_epoch=_int("steps_per_epoch", d("steps_per_epoch"), optional=True),
        lr=_float("lr", d("lr")),
        momentum=_float("momentum", d("momentum"), strict=False),
        seed=_int("seed", d("seed"), minimum=0),
        repeat=_int("repeat", d("repeat"), minimum=0),
        seed_per_repeat=_seed_per_repeat(d("seed_per_repeat"), _int("repeat", d("repeat"), minimum=0),
                                         workload["workload_kind"]),
        fusion_threshold_mb=_float("fusion_threshold_mb", d("fusion_threshold_mb"), strict=False),
        cycle_time_ms=_float("cycle_time_ms", d("cycle_time_ms")),
        autotune=_autotune(d("autotune"), algorithm),
        engine_thread=_bool("engine_thread", d("engine_thread")),
        timeline=_bool("timeline", d("timeline")),
        **_timeline_sample(d("timeline"), d("timeline_steps"), d("timeline_ranks")),
        **placement,
        resync_epochs=_int("resync_epochs", d("resync_epochs"), minimum=0),
        sync_every=_int("sync_every", d("sync_every"), minimum=0),
        # only eager-SGD reads it: other algorithms keep the default, so that sweeping it beside
        # sync (eager_catch_up=paper,apply_all) does not run sync twice
        eager_catch_up=catch_up if algorithm in EAGER_ALGORITHMS else "apply_all",
        **_compute(c, workload["workload_kind"], model=model, batch_size=_int("batch_size", d("batch_size")),
                   threads_per_worker=threads // workers),
        params=_params(c.get("params")),
        run_timeout=None if run_timeout is None else _float("run_timeout", run_timeout),
        **imbalance,
        **workload,
    )


# Fields whose default changed, keyed as before in runs that do not read them, so that those
# runs keep their keys: ``sync_every`` was 10 (steps) until eager-SGD's resynchronisation
# period became ``resync_epochs``; only eager-SGD's runs read it.
_KEYED_AS_BEFORE = {"sync_every": (10, EAGER_ALGORITHMS)}


def run_key(spec: RunSpec) -> str:
    """Stable identity of a run: same semantic config, same key (paths and times excluded).

    Fields added after the first release (``hashed_when_default=False``) count only when
    set, so the keys of runs recorded before they existed do not change."""
    semantic = {}
    for f in FIELDS:
        if not f.identity:
            continue
        value = getattr(spec, f.name)
        if f.name in _KEYED_AS_BEFORE and spec.algorithm not in _KEYED_AS_BEFORE[f.name][1]:
            value = _KEYED_AS_BEFORE[f.name][0]
        if not f.hashed_when_default and value == f.default:
            continue
        semantic[f.name] = list(value) if isinstance(value, tuple) else value
    blob = json.dumps(semantic, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


__all__ = ["REDUCERS", "build_run_spec", "run_key"]
