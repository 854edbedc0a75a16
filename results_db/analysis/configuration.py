"""What "a configuration" is: the one definition, which compare, regression, reproduction, the
artifact, the figures and the sweep's repeats on demand all read.

Two runs are repeats of one configuration when they agree on every field the run-field registry
marks ``grouping`` (``workloads.spec.CONFIG_FIELDS``: every identity field but the seed, the
repeat index, whether repeats vary the seed, and which steps and ranks a timeline recorded), each
free parameter (``params.NAME``) an axis of its own. Runs that differ in anything else (momentum,
steps_per_epoch, a parameter) are different configurations.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import pandas as pd

from workloads.spec import CONFIG_FIELDS

from results_db.store.run_rows import hashable_values

# ``params`` stands for one axis per free parameter (``params.NAME``), found in the data
CONFIG_AXES = CONFIG_FIELDS


def config_axes(runs: pd.DataFrame) -> list[str]:
    """The configuration axes of these runs: the registry's, with ``params`` as one axis per parameter."""
    params = sorted(c for c in runs.columns if c.startswith("params."))
    return [a for a in CONFIG_AXES if a != "params"] + params


def hashable(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns pandas can group by without merging what run_key tells apart
    (``run_rows.hashable_values``: lists and mappings as canonical JSON text, a free parameter
    of mixed types as the JSON text of each value)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype != object and not column.startswith("params."):
            continue   # a typed column (numbers, times) holds nothing to make hashable: 100k rows skipped
        changed = hashable_values(column, list(out[column]))
        if changed is not None:
            out[column] = pd.Series(changed, index=out.index, dtype=object)
    return out


def values_key(values: Sequence[Any]) -> tuple:
    """A configuration's values as a dict key: NaN and None one value (pandas groups them so)."""
    return tuple(None if (isinstance(v, float) and v != v) else v for v in values)


def configuration_key(fields: Mapping[str, Any]) -> str:
    """A run's configuration as text, from its spec's fields (``RunSpec.to_dict()``) before it ran:
    what the sweep's repeats on demand group its first stage by, the same fields that group the
    stored runs."""
    chosen = {name: fields.get(name) for name in CONFIG_AXES}
    return json.dumps(chosen, sort_keys=True, separators=(",", ":"), default=list)
