"""The Parsl and Hydra releases scalestudy runs on: the ranges CI tests, refused outside them.

scalestudy uses Parsl and Hydra through their public interfaces only, but even those change:
Parsl ships a release a week and promises no compatibility between them, and a release that
breaks a sweep halfway (its batch jobs submitted, its runs recorded) costs more than one that
never starts. So ``pyproject.toml`` gives each a floor and a ceiling, and they are exactly the
releases CI runs the suites that touch them on (``.ci/run``: the floor in an environment of
its own, the ceiling in the project's own): the Parsl-facing suites (Slurm, the PBS Pro and
Cobalt stand-ins, packed allocations, encryption, node loss, the run placement) and the
Hydra-facing ones (composition, the sweeper, Hydra's own launcher test suites). A release
outside the range is refused before a sweep records or submits anything, in one line that
names the tested range; raising the ceiling is a matter of running those suites on the new
release and changing the one line in ``pyproject.toml`` (docs/reference/development.md, "Supported Parsl and Hydra
releases").

Supported today (docs/reference/development.md, "Supported Parsl and Hydra releases"; ``tests/orchestrator/test_versions.py`` checks
that the page says what ``pyproject.toml`` does):

- Parsl 2025.7.7 to 2026.10.26. The floor is the first release whose worker pool finds the
  interchange by a probe message and its answer (Parsl PR #3896). Before it, the pool connected
  and then attached a ZMQ monitor to hear the connection made: when the connection was made
  first, as it is on a fast or loopback network whenever the pool's thread is descheduled between
  the two calls, the event never came, and the pool waited its whole ``address_probe_timeout``
  and quit ("No viable address found"). Under CI's load that happened in 2 of 3 runs of the
  floor suites on 2024.12.9; a ZMQ socket that connects before its monitor is attached misses
  the event every time (tried). The ceiling is the newest release CI has run the suites on.
  (Since 2024.12.9 ``ClusterProvider``, the base of the Cobalt provider, takes no ``channel``;
  since 2024.7.8 ``MPIExecutor`` takes ``interchange_launch_cmd``.)
- Hydra 1.3.0 to 1.3.8, OmegaConf 2.3.0 to 2.3.1: the sweep app asks for Hydra 1.3's defaults
  (``version_base="1.3"``), and the Hydra-facing suites (Hydra's own launcher suites among them)
  pass on every 1.3 release tried, 1.3.0 (the floor), 1.3.1, 1.3.2 and 1.3.8 (the newest).

The ranges are read from the installed project's metadata, which ``pyproject.toml`` writes:
they are declared once.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata

from ..errors import ScalestudyError

PROJECT = "scalestudy"


class UntestedRelease(ScalestudyError):
    """An installed dependency outside the range scalestudy is tested with (one line)."""


@lru_cache(maxsize=None)
def tested_range(dist: str) -> str | None:
    """The version range ``pyproject.toml`` gives ``dist`` (e.g. ``>=2025.6.30,<=2026.10.26``);
    None where the project is not installed (run from a bare source tree) or names no range."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    try:
        requirements = metadata.requires(PROJECT) or []
    except metadata.PackageNotFoundError:
        return None
    for line in requirements:
        req = Requirement(line)
        if canonicalize_name(req.name) == canonicalize_name(dist) and req.marker is None:
            return str(req.specifier) or None
    return None


def untested(dist: str, installed: str | None = None) -> str | None:
    """Why the installed ``dist`` is refused (one line), or None when it is within the tested
    range. ``installed``: the version to judge (default: the one installed)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    tested = tested_range(dist)
    if tested is None:
        return None
    if installed is None:
        try:
            installed = metadata.version(dist)
        except metadata.PackageNotFoundError:
            return f"{dist} is not installed; scalestudy needs {dist}{_pretty(tested)}"
    try:
        ok = Version(installed) in SpecifierSet(tested)
    except InvalidVersion:
        ok = False
    if ok:
        return None
    return (f"{dist} {installed} is installed, but scalestudy is tested with {dist}{_pretty(tested)} only "
            f"(pyproject.toml; docs/reference/development.md): "
            f"pip install '{dist}{_pretty(tested)}'")


def check_tested(dist: str) -> None:
    """Raise ``UntestedRelease`` (one line) when the installed ``dist`` is outside its tested range."""
    problem = untested(dist)
    if problem is not None:
        raise UntestedRelease(problem)


def _pretty(specifier: str) -> str:
    """``>=A,<=B`` in that order (packaging sorts a set's parts by their text)."""
    parts = sorted(specifier.split(","), key=lambda p: (not p.startswith(">"), p))
    return ",".join(parts)


def bounds(dist: str) -> tuple[str | None, str | None]:
    """(floor, ceiling) of ``dist``'s tested range: the ``>=`` and ``<=`` releases, which CI
    installs and runs (``.ci/run``)."""
    parts = (tested_range(dist) or "").split(",")
    floor = next((p[2:] for p in parts if p.startswith(">=")), None)
    ceiling = next((p[2:] for p in parts if p.startswith("<=")), None)
    return floor, ceiling


if __name__ == "__main__":   # python -m orchestrator.sweep.versions floor|ceiling DIST (for .ci/run)
    import sys

    which, dist = sys.argv[1], sys.argv[2]
    value = bounds(dist)[("floor", "ceiling").index(which)]
    if value is None:
        sys.exit(f"pyproject.toml gives {dist} no {which} (>= for a floor, <= for a ceiling)")
    print(value)
