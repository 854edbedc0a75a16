"""scalestudy's Hydra config schema, derived from the run-field registry (``workloads.spec``).

Registered in Hydra's ConfigStore as ``scalestudy_schema`` and named first in
``conf/config.yaml``'s defaults, it makes the config a *structured* one: a key that
the schema does not know — a typo in a study file (``bach_size: 64``) or on the
command line, even with Hydra's ``+`` — is refused when the config is composed,
instead of being carried along and ignored. Free keys belong under ``params:``.

Values are typed ``Any`` on purpose: ``runspec.build_run_spec`` validates them and
names the field and the value in one line, which OmegaConf's conversion errors do not.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from hydra.core.config_store import ConfigStore

from workloads.spec import FIELDS, RunField

from ..errors import ConfigError

# Keys of a sweep that are not fields of a run: where results go and how to launch.
SETTINGS: dict[str, tuple[Any, str]] = {
    "account": (None, "the site's account / project to charge, if not the site's own"),
    "queue": (None, "the site's queue (Slurm partition), if not the site's own"),
    "walltime": (None, "HH:MM:SS per batch job, if not the site's own"),
    "allocation": (None, "per_size (a batch job per node count) or packed (the whole sweep in one batch job), "
                         "if not the site's own"),
    "allocation_nodes": (None, "nodes of the packed batch job; null: the site's, else the sweep's largest run"),
    "db_url": (None, "SQLAlchemy URL; null: $SCALESTUDY_DB_URL or ./scalestudy.db"),
    "rerun": (False, "run again even runs already done (--rerun)"),
    "dry_run": (False, "print what would be submitted, submit nothing (--dry-run)"),
    "show_scripts": (False, "with --dry-run: print each batch script too, not only write it to a file "
                            "(--show-scripts)"),
}
# workload.* keys that shape how a command runs but are not fields of their own
WORKLOAD_KEYS: dict[str, tuple[Any, str]] = {
    "kind": ("builtin", "builtin (our training loop) or command (your program under the site's MPI launcher)"),
    "command": (None, "command workloads: the program and its arguments, a list or one string split like a shell "
                      "would (no shell runs it); ${batch_size} and other keys interpolate"),
    "shell": (False, "command workloads: run `command` (a string) with /bin/sh -c; only if you need a shell"),
    "check_command": (True, "command workloads: check before submission that the program exists on this host"),
    "metrics": ({}, "command workloads: NAME: {pattern: REGEX with one group, reduce: last, ranks: 0, "
                    "ranks_reduce: mean, required: true}; throughput is the headline metric"),
}
# retries.*: how often a failed run is started again, by why it failed (orchestrator/sweep/retry_policy.py).
# A run that fails while being set up (bad config, an import or a factory that raises) never is.
RETRY_KEYS: dict[str, tuple[Any, str]] = {
    "crash": (0, "retries of a run whose MPI job failed (a rank crashed or was killed)"),
    "timeout": (0, "retries of a run stopped at its run_timeout"),
    "node_lost": (2, "retries of a run whose batch job or node died under it (on a new allocation)"),
}
MISSING = "???"
# repeats.*: repeats on demand, the rule's keys (orchestrator/sweep/repeats_on_demand.py)
REPEAT_KEYS: dict[str, tuple[Any, str]] = {
    "until": (None, "repeats on demand: add repeats to each configuration until its mean's 95 % interval is within "
                    "± this fraction (0.03: ±3 %), from a first stage of the sweep's repeat= values (>= 2; Stein's "
                    "two-stage rule); null: the repeats swept, no more"),
    "most": (10, "repeats on demand: at most this many repeats of a configuration in all"),
    "metric": ("throughput", "repeats on demand: the measured run column (or metrics.NAME) whose interval is tightened"),
    "first_stage": (None, "set by the sweep for repeats on demand (the first stage's size): not to be given"),
}



def config_default(f: RunField) -> Any:
    if f.name == "study":
        return MISSING
    if f.config_default is not dataclasses.MISSING:
        return f.config_default
    return list(f.default) if isinstance(f.default, tuple) else f.default


def _field(default: Any) -> Any:
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d))
    return dataclasses.field(default=default)


def _build_schema() -> type:
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for f in FIELDS:
        if f.config is None:
            continue
        head, _, rest = f.config.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = config_default(f)
        else:
            top[head] = config_default(f)
    nested.setdefault("workload", {})
    for key, (default, _) in WORKLOAD_KEYS.items():
        nested["workload"].setdefault(key, default)
    for key, (default, _) in SETTINGS.items():
        top[key] = default
    nested["retries"] = {k: d for k, (d, _) in RETRY_KEYS.items()}
    nested["repeats"] = {k: d for k, (d, _) in REPEAT_KEYS.items()}
    fields: list[tuple[str, Any, Any]] = [(k, Any, _field(v)) for k, v in top.items()]
    for group, values in nested.items():
        node = dataclasses.make_dataclass(f"{group.title()}Config", [(k, Any, _field(v)) for k, v in values.items()])
        fields.append((group, node, dataclasses.field(default_factory=node)))
    return dataclasses.make_dataclass("SweepConfig", fields)


SweepConfig = _build_schema()


def config_keys() -> list[str]:
    """Every key the config knows, nested ones dotted (``imbalance.delay_ms``)."""
    keys = []
    for f in dataclasses.fields(SweepConfig):
        if dataclasses.is_dataclass(f.type):
            keys.extend(f"{f.name}.{g.name}" for g in dataclasses.fields(f.type))
        else:
            keys.append(f.name)
    return keys


def closest_key(key: str) -> str | None:
    """The known config key a misspelt one most likely meant."""
    keys = config_keys()
    leaf = key.split(".")[-1]
    match = difflib.get_close_matches(key, keys, n=1, cutoff=0.6) or difflib.get_close_matches(
        leaf, [k.split(".")[-1] for k in keys], n=1, cutoff=0.6)
    if not match:
        return None
    return next((k for k in keys if k == match[0] or k.endswith("." + match[0])), match[0])


def key_help() -> list[tuple[str, Any, str]]:
    """(key, default, help) for every key, for ``scalestudy sweep --help``."""
    rows = [(f.config, config_default(f), f.help) for f in FIELDS if f.config]
    rows += [(f"workload.{k}", d, h) for k, (d, h) in WORKLOAD_KEYS.items() if k != "kind"]
    rows += [(k, d, h) for k, (d, h) in SETTINGS.items()]
    rows += [(f"retries.{k}", d, h) for k, (d, h) in RETRY_KEYS.items()]
    rows += [(f"repeats.{k}", d, h) for k, (d, h) in REPEAT_KEYS.items() if k != "first_stage"]
    return rows


def register() -> None:
    ConfigStore.instance().store(name="scalestudy_schema", node=SweepConfig)


register()


_NOT_IN = re.compile(r"(?:In '(?P<source>[^']+)':.*?)?Key '(?P<key>[^']+)' (?:not in|is not in struct)(?: '(?P<node>\w+)')?",
                     re.DOTALL)
_NO_OVERRIDE = re.compile(r"Could not (?:override|append to config)[^']*'(?P<key>[^']+)'")
_NODE_PREFIX = {"ImbalanceConfig": "imbalance.", "WorkloadConfig": "workload.", "RetriesConfig": "retries.",
                "RepeatsConfig": "repeats."}


def unknown_key(key: str, source: str | None = None) -> str:
    """The one line for a key the schema does not know."""
    if key.startswith("params."):
        return (f"invalid config: {key}: a new free parameter is added with a '+': +{key}=VALUE "
                "(then it sweeps like any key: +params.NAME=1,2,4)")
    where = f" in {source}" if source else ""
    close = closest_key(key)
    hint = f"; did you mean {close}?" if close else ""
    leaf = key.split(".")[-1]
    return (f"invalid config: {key}: unknown key{where}{hint} (`scalestudy sweep --help` lists the keys; "
            f"free parameters go under params:, e.g. +params.{leaf}=VALUE)")


def explain_unknown_key(text: str) -> str | None:
    """Hydra's and OmegaConf's messages about an unknown key, as our one line (None: not such a message)."""
    m = _NOT_IN.search(text)
    if m:
        prefix = _NODE_PREFIX.get(m.group("node") or "", "")
        key = m.group("key") if m.group("key").startswith(prefix) else prefix + m.group("key")
        return unknown_key(key, m.group("source"))
    m = _NO_OVERRIDE.search(text)
    if m:
        return unknown_key(m.group("key"))
    return None


def check_known_keys(config: dict[str, Any]) -> None:
    """Refuse keys the schema does not know even when Hydra let them in (``+key=value``
    turns off Hydra's own check). Free keys live under ``params``."""
    known = set(config_keys())
    groups = {k.split(".")[0] for k in known if "." in k}
    for key, value in config.items():
        if key in groups and isinstance(value, dict):
            for sub in value:
                if f"{key}.{sub}" not in known:
                    raise ConfigError(f"{key}.{sub}", value[sub], unknown_key(f"{key}.{sub}").split(": ", 2)[2])
        elif key not in known:
            raise ConfigError(key, value, unknown_key(key).split(": ", 2)[2])
