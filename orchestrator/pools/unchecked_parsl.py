"""Parsl's modules imported without typeguard's run-time type checks.

Parsl decorates about thirty of its classes and functions with typeguard's ``@typechecked``,
and typeguard instruments each one as it is decorated, at import: it reads the source again,
rewrites its syntax tree and compiles it again. That is 0.25-0.35 s of the 0.7-0.9 s ``import
parsl`` takes on this VM (``benchmarks/RESULTS.md``, issue 29), paid on the way to a sweep's
first run three times over: by the sweep driver, by the interchange and by the worker pool in
the batch job. The checks guard Parsl's constructors against wrongly typed arguments from a
user writing a Parsl config by hand; scalestudy's Parsl objects are built by ``parsl_config``
from a validated ``SiteConfig``, and ``tests/test_unchecked_parsl.py`` builds every site file's
Parsl config with the checks on, so a wrong type there still fails a test. (typeguard itself
makes the decorator a no-op under ``python -O``; this does the same for Parsl's modules only,
and only for those imported inside ``typechecks_off``.)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typechecked`` that checks nothing: ``@typechecked`` and ``@typechecked(...)`` alike."""
    return target if target is not None else _unchecked


@contextmanager
def typechecks_off() -> Iterator[None]:
    """Modules first imported inside bind a ``typechecked`` that returns what it decorates
    (Parsl's do ``from typeguard import typechecked`` at import); modules already imported,
    and those imported after, keep typeguard's. Without typeguard installed, nothing to do."""
    try:
        import typeguard
    except ImportError:
        yield
        return
    original = typeguard.typechecked
    typeguard.typechecked = _unchecked
    try:
        yield
    finally:
        typeguard.typechecked = original
