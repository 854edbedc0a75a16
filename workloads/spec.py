"""The run spec: the single document a workload is started with, and the registry of a run's fields.

Every field of a run is declared here once, as a field of ``RunSpec`` with its
default and its ``axis`` metadata: where it sits in the Hydra config, whether it is
part of the run's identity (``run_key``), whether two runs that differ in it are
different configurations (``compare``, figures), its label, its help text. The
Hydra schema, ``run_key``, the ``runs`` table's columns, ``query``, ``compare``, the
figures and the tables all derive from ``FIELDS`` (``tests/orchestrator/test_axis_registry.py``
fails when one of them does not).

The orchestrator builds and validates the spec from Hydra's config; the workload only
reads it. It is frozen and JSON-serialisable so that the same bytes describe the run
on the login node, in the batch job and in the results database.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

SPEC_SCHEMA = 1
# repeat r of a run whose repeats vary the seed trains with seed + REPEAT_SEED_STRIDE x r (``RunSpec.run_seed``)
REPEAT_SEED_STRIDE = 1000


def axis(default: Any = dataclasses.MISSING, *, help: str, label: str | None = None, config: str | None = "",
         identity: bool = True, grouping: bool | None = None, hashed_when_default: bool = True,
         column: bool = True, summary: bool = False, config_default: Any = dataclasses.MISSING,
         factory: Any = None, builtin_only: bool = False) -> Any:
    """A ``RunSpec`` field with its registry entry (see ``RunField``)."""
    meta = {"help": help, "label": label, "config": config, "identity": identity,
            "grouping": identity if grouping is None else grouping, "hashed_when_default": hashed_when_default,
            "column": column, "summary": summary, "config_default": config_default, "builtin_only": builtin_only}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"scalestudy": meta})
    return dataclasses.field(default=default, metadata={"scalestudy": meta})


@dataclass(frozen=True)
class RunSpec:
    # -- identity of the study and where it runs ------------------------------------------
    study: str = axis("", config="study_name", identity=False, column=False,
                      help="the study this run belongs to (set by the study preset, or study_name=NAME)")
    site: str = axis("local", help="a file in site_configs/ (or a path to one)")
    # -- the scaling axes -------------------------------------------------------------------
    nodes: int = axis(1, summary=True, help="nodes in the allocation")
    workers_per_node: int = axis(1, label="workers per node", summary=True,
                                 help="MPI ranks per node; total ranks = nodes x workers_per_node")
    threads_per_node: int = axis(1, label="threads per node", summary=True, config_default="${workers_per_node}",
                                 help="CPU threads shared by a node's workers, each gets threads_per_node / "
                                      "workers_per_node (default: one per worker)")
    batch_size: int = axis(32, label="batch size per worker", summary=True,
                           help="per worker; the global batch is batch_size x total ranks")
    # -- what trains -------------------------------------------------------------------------
    algorithm: str = axis("sync", builtin_only=True, summary=True,
                          help="sync, ddp, horovod, eager_solo, eager_majority, async_ps")
    model: str = axis("small_cnn", builtin_only=True, summary=True,
                      help="small_cnn, resnet20, resnet32, resnet50, nt3, lstm, hyperplane_mlp, an installed short "
                           "name, or pkg.module:factory")
    dataset: str = axis("digits", builtin_only=True,
                        help="digits, synthetic_images, nt3_synthetic, sequences, cifar10, imagefolder, hyperplane "
                             "(a regression: loss is the MSE, no top-1), an installed short name, or pkg.module:factory")
    dataset_path: Optional[str] = axis(None, builtin_only=True, label="dataset path", identity=False,
                                       help="local folder for cifar10 / imagefolder (not part of the run's identity)")
    epochs: int = axis(3, help="training epochs")
    steps_per_epoch: Optional[int] = axis(None, label="steps per epoch",
                                          help="cap on steps per epoch (null: the whole training set)")
    lr: float = axis(0.1, label="learning rate", help="SGD learning rate")
    momentum: float = axis(0.9, help="SGD momentum")
    seed: int = axis(0, grouping=False, summary=True, help="random seed (runs that differ only in seed are repeats)")
    repeat: int = axis(0, grouping=False, hashed_when_default=False,
                       help="repeat index: runs that differ only in it are repeats of one configuration")
    seed_per_repeat: bool = axis(True, grouping=False, hashed_when_default=False, column=False, builtin_only=True,
                                 label="seed per repeat",
                                 help="true: repeat r trains with seed + 1000 r (its data order, initial weights, "
                                      "injected delays and emulated times differ, so accuracy has a spread over "
                                      "repeats); false: every repeat with seed itself (repeats then measure timing "
                                      "noise only). Runs stored before this key existed ran every repeat with seed")
    # -- communication ----------------------------------------------------------------------
    fusion_threshold_mb: float = axis(64.0, builtin_only=True, label="fusion threshold (MB)",
                                      help="fuse ready gradients into buffers up to this size; 0: one allreduce "
                                           "per tensor")
    cycle_time_ms: float = axis(5.0, builtin_only=True, label="cycle time (ms)",
                                help="at most one negotiation/fusion cycle per this many ms")
    autotune: bool = axis(False, builtin_only=True, hashed_when_default=False,
                          help="sync: try cycle_time_ms, a fifth of it and one cycle per step in the first steps and "
                               "keep the fastest (run metrics: autotune_cycle_time_ms); horovod: HOROVOD_AUTOTUNE")
    engine_thread: bool = axis(True, builtin_only=True, label="engine thread", hashed_when_default=False,
                               help="sync: run the engine's cycles on a thread of their own (Horovod's design); "
                                    "false: on the training thread, between gradient hooks")
    timeline: bool = axis(False, builtin_only=True,
                          help="record per-tensor events: gradient ready, fused allreduces, waits, updates")
    timeline_steps: str = axis("", builtin_only=True, label="timeline steps", hashed_when_default=False,
                               grouping=False,
                               help="timeline=true: record only steps FIRST-LAST (e.g. 100-119), so that a long "
                                    "run's timeline stays small; empty: every step")
    timeline_ranks: int = axis(0, builtin_only=True, label="timeline ranks", hashed_when_default=False,
                               grouping=False,
                               help="timeline=true: record only this many ranks, spread evenly from rank 0 to the "
                                    "last; 0: every rank")
    device: str = axis("cpu", config_default="auto", summary=True,
                       help="cpu, or cuda: one rank per GPU (auto: cuda where the site declares GPUs, "
                            "accelerators_per_node, else cpu)")
    data_path: str = axis("auto", label="data path", hashed_when_default=False, builtin_only=True,
                          help="how gradients travel: auto, mpi, torch_distributed (nccl on GPUs, gloo on CPUs), "
                               "cuda_aware_mpi, host_staging (pinned host buffers + MPI); the run records the "
                               "one it used (data_path_used)")
    gpu_binding: str = axis("none", config=None, identity=False, column=False,
                            help="the site's GPU of a local rank: direct, reverse (Polaris), or none (workloads/"
                                 "placement.py)")
    gpus_per_node: int = axis(0, config=None, identity=False, column=False,
                              help="the site's GPUs per node (accelerators_per_node)")
    resync_epochs: int = axis(10, builtin_only=True, label="resynchronise every (epochs)", hashed_when_default=False,
                              help="eager_*: a synchronous round and model averaging at the end of every this many "
                                   "epochs, as the eager-SGD authors' scripts (10), and at the last step; 0: only "
                                   "the last; sync_every > 0 replaces it")
    sync_every: int = axis(0, builtin_only=True, label="synchronous round every",
                           help="eager_*: a synchronous round and model averaging every this many steps instead "
                                "of resync_epochs (0: resync_epochs decides)")
    eager_catch_up: str = axis("apply_all", builtin_only=True, label="catch-up", hashed_when_default=False,
                               help="eager_*: paper: the paper's mechanism after the authors' code (every "
                                    "rank computes each of its steps and applies the latest result; models drift "
                                    "until resynchronised to rank 0's); extensions: a rank that missed rounds "
                                    "joins the round the others reached and applies every missed result "
                                    "(apply_all: models stay identical) or only the latest (latest: drift until "
                                    "resync); lockstep: computes every round, applies every result (carries its "
                                    "delays)")
    compute: str = axis("real", builtin_only=True, summary=True, hashed_when_default=False,
                        help="real; emulated: forward and backward are sleeps drawn from compute_profile, "
                             "everything that communicates stays real; padded: computed for real, then held until "
                             "each step's forward and backward have lasted compute_profile's times "
                             "(workloads/emulation.py)")
    compute_profile: Optional[str] = axis(None, builtin_only=True, label="compute profile", hashed_when_default=False,
                                          help="compute=emulated or padded: a profile file (scalestudy profile RUN_ID "
                                               "-o FILE) or a shipped one's name (workloads/profiles/)")
    # -- load imbalance ----------------------------------------------------------------------
    imbalance_kind: str = axis("none", builtin_only=True, label="imbalance", config="imbalance.kind",
                               help="none, injected, fixed, exponential, lognormal, shifted, inherent")
    imbalance_ranks: int = axis(1, builtin_only=True, label="delayed ranks per step", config="imbalance.ranks",
                                help="injected: ranks picked per step by an RNG shared by all ranks")
    imbalance_delay_ms: float = axis(0.0, builtin_only=True, label="injected delay (ms)", config="imbalance.delay_ms",
                                     help="injected/fixed: the sleep; exponential/lognormal: its mean; shifted: the largest")
    imbalance_rank: int = axis(-1, builtin_only=True, label="slow rank", config="imbalance.rank",
                               help="fixed: the slow rank (-1: the last)")
    imbalance_sigma: float = axis(1.0, builtin_only=True, label="imbalance sigma", config="imbalance.sigma",
                                  help="lognormal: shape")
    # -- the user's own workload ------------------------------------------------------------
    workload_kind: str = axis("builtin", label="workload", config="workload.kind", hashed_when_default=False,
                              help="builtin (our training loop; model/dataset may be the user's), or command")
    command: tuple = axis(config=None, hashed_when_default=False, factory=tuple,
                          help="the program a command workload runs on every rank (argument list)")
    params: dict = axis(config="params", hashed_when_default=False, factory=dict,
                        help="free parameters (+params.NAME=VALUE): part of the run's identity, passed to factories")
    metric_patterns: dict = axis(config=None, identity=False, column=False, factory=dict,
                                 help="command workloads: metric name -> {pattern, reduce, ranks, required}")
    run_timeout: Optional[float] = axis(None, label="run time limit (s)", identity=False, column=False,
                                        help="seconds before a run's MPI job is killed (null: the site's walltime "
                                             "less a margin)")
    schema: int = axis(SPEC_SCHEMA, config=None, identity=False, column=False, help="spec format version")

    @property
    def run_seed(self) -> int:
        """The seed the run trains with: ``seed``, plus ``REPEAT_SEED_STRIDE`` x ``repeat`` where
        repeats vary the seed (``seed_per_repeat``). The stride keeps a sweep of seeds (0, 1, 2)
        and its repeats apart: seed 1's first repeat is not seed 0's second."""
        return self.seed + REPEAT_SEED_STRIDE * self.repeat if self.seed_per_repeat else self.seed

    def as_run(self) -> "RunSpec":
        """The spec the training loop reads: ``seed`` replaced by ``run_seed`` (and
        ``seed_per_repeat`` off, so that it is not added twice)."""
        return dataclasses.replace(self, seed=self.run_seed, seed_per_repeat=False)

    @property
    def world_size(self) -> int:
        return self.nodes * self.workers_per_node

    @property
    def threads_per_worker(self) -> int:
        return self.threads_per_node // self.workers_per_node

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    def timeline_step_range(self) -> tuple[int, int] | None:
        """``timeline_steps`` as (first, last), inclusive; None: every step."""
        if not self.timeline_steps:
            return None
        first, _, last = self.timeline_steps.partition("-")
        return int(first), int(last)

    def timeline_rank_sample(self) -> frozenset[int] | None:
        """The ranks whose timeline is recorded: ``timeline_ranks`` spread evenly from rank 0 to the
        last (both always in); None: every rank."""
        n, world = self.timeline_ranks, self.world_size
        if n <= 0 or n >= world:
            return None
        if n == 1:
            return frozenset({0})
        return frozenset(round(i * (world - 1) / (n - 1)) for i in range(n))

    def records_timeline(self, step: int, rank: int) -> bool:
        """Whether this rank writes this step's timeline events (``timeline`` on, in the window and sample)."""
        if not self.timeline:
            return False
        window, sample = self.timeline_step_range(), self.timeline_rank_sample()
        return (window is None or window[0] <= step <= window[1]) and (sample is None or rank in sample)

    def resync_period(self, steps_per_epoch: int) -> int:
        """eager-SGD's synchronous rounds, in steps: ``sync_every`` where set, else every
        ``resync_epochs`` epochs (0: only the last step)."""
        return self.sync_every if self.sync_every > 0 else self.resync_epochs * steps_per_epoch

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["command"] = list(self.command)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunSpec":
        schema = data.get("schema", SPEC_SCHEMA)
        if schema != SPEC_SCHEMA:
            raise ValueError(f"spec schema {schema!r} is not supported (this workload reads {SPEC_SCHEMA})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"spec has unknown fields: {', '.join(unknown)}")
        data = dict(data)
        if "command" in data:
            data["command"] = tuple(data["command"] or ())
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> "RunSpec":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")


@dataclass(frozen=True)
class RunField:
    """One field of a run, as every layer sees it."""

    name: str                 # RunSpec attribute; the runs column of the same name; query/compare name
    type: type                # int, float, str, bool, dict or tuple
    optional: bool            # None is a valid value
    default: Any
    help: str
    label: str                # in tables and figures: words, no abbreviations
    config: str | None        # its key in the Hydra config ("imbalance.kind"); None: not set from the config
    identity: bool            # hashed into run_key
    grouping: bool            # runs differing in it are different configurations (identity minus seed, repeat)
    hashed_when_default: bool  # False for fields added after run_key v1: keys of older runs stay the same
    column: bool              # has a column in the runs table
    summary: bool             # shown in the default query / status tables
    config_default: Any       # the config's default when it differs from the spec's (an interpolation)
    builtin_only: bool        # describes our training loop: nothing a command workload's run did (shown as -)


def _fields() -> tuple[RunField, ...]:
    hints = {"int": int, "float": float, "str": str, "bool": bool, "dict": dict, "tuple": tuple}
    out = []
    for f in dataclasses.fields(RunSpec):
        meta = f.metadata["scalestudy"]
        annotation = str(f.type)
        optional = annotation.startswith("Optional[")
        base = annotation.removeprefix("Optional[").removesuffix("]") if optional else annotation
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        config = f.name if meta["config"] == "" else meta["config"]
        out.append(RunField(name=f.name, type=hints[base], optional=optional, default=default, help=meta["help"],
                            label=meta["label"] or f.name.replace("_", " "), config=config,
                            identity=meta["identity"], grouping=meta["grouping"],
                            hashed_when_default=meta["hashed_when_default"], column=meta["column"],
                            summary=meta["summary"], config_default=meta["config_default"],
                            builtin_only=meta["builtin_only"]))
    return tuple(out)


FIELDS: tuple[RunField, ...] = _fields()
FIELD = {f.name: f for f in FIELDS}
IDENTITY_FIELDS = tuple(f.name for f in FIELDS if f.identity)
# two runs are repeats of one configuration when they agree on all of these
CONFIG_FIELDS = tuple(f.name for f in FIELDS if f.grouping)
COLUMN_FIELDS = tuple(f.name for f in FIELDS if f.column)
# what a command workload's runs hold only as defaults (they ran the user's program, not our loop)
BUILTIN_ONLY_FIELDS = tuple(f.name for f in FIELDS if f.builtin_only)
