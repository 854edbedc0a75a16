"""A pytest plugin: the test modules in order of their measured time, longest first, so that a lane
of pytest-xdist workers (``--dist loadfile --no-loadscope-reorder``) ends together instead of one
worker running a long module alone at the end.

pytest-xdist's own order for ``loadfile`` is by number of tests, most first: a module of 100 fast
parametrized cases went out before one of 4 sweeps through the scheduler stand-ins, which then
began last and ran on while the other workers had nothing to do. Longest first is the classic
list-scheduling rule (each worker takes the next module when it is free; the last module to start
is then a short one). The times are each module's wall seconds in the whole suite, from
``tests/module_weights.json``, which ``scripts/test_timing_report.py FILE --write-weights`` writes
from a timed run (scripts/pytest_timing.py). A module not in it (a new one) goes first: its time is
unknown, and a long one started last is what this avoids. The order within a module is kept."""

from __future__ import annotations

import json
from pathlib import Path

WEIGHTS = Path(__file__).resolve().parent.parent / "tests" / "module_weights.json"


def load_weights(path: Path | None = None) -> dict[str, float]:
    """Each module's wall seconds (``tests/...py`` -> s); empty when the file is missing."""
    path = path or WEIGHTS
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text())["wall_seconds"].items()}
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, AttributeError) as exc:
        raise SystemExit(f"{path}: not a weights file ({type(exc).__name__}: {exc}); rewrite it with "
                         "scripts/test_timing_report.py --write-weights (docs/reference/development.md)") from exc


def pytest_collection_modifyitems(config, items) -> None:
    weights = load_weights()
    if not weights:
        return
    unknown = max(weights.values()) + 1.0
    # a stable sort on the module's weight alone keeps each module's tests together and in order
    items.sort(key=lambda item: -weights.get(item.nodeid.split("::")[0], unknown))
