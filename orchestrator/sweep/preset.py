"""What a sweep takes from its study preset (``study=NAME``, ``smoke`` by default).

A preset is a study file, ``conf/study/NAME.yaml`` (or ``DIR/study/NAME.yaml`` with
``--config-dir DIR``): settings (``epochs: 10``) and a grid (``hydra.sweeper.params``,
``nodes: 1,2``). A study the user names without naming a preset (``study_name=mine`` and no
``study=``) is the user's own: it sweeps what the command line sweeps and nothing else, and the
default preset gives only the settings the command line does not. Where a preset is named (or
none is and no study is named either: ``scalestudy sweep`` runs the smoke study) its grid is
swept too, and the sweep says which axes came from it (``PresetUse.lines``): the dry run in its
summary, a real sweep in its first line.

The sweeper (``sweeper.ScalestudySweeper``) applies the rule (``grid_applies``); the recorder and
the dry run describe it from the sweep's config (``preset_use``), which holds the same command
line (``hydra.overrides.task``).
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf

SHIPPED = "orchestrator/sweep/conf/study"   # the shipped presets, as the lines name them


def override_key(line: str) -> str:
    """The key of a command-line override (``+params.x=1`` -> ``params.x``; ``~key`` -> ``key``)."""
    return line.split("=", 1)[0].strip().lstrip("+~")


def given_keys(overrides: Sequence[str]) -> set[str]:
    return {override_key(o) for o in overrides}


def _sweeps_presets(overrides: Sequence[str]) -> str:
    """The swept value (``""`` where none) of ``study=a,b`` or ``study=glob(run_*)`` (``artifact rerun``): a sweep over presets. Hydra
    builds the grid once, from the primary config, which holds the default preset, not any of the
    swept ones: that grid belongs to no job, and each preset's own grid cannot apply per job."""
    for line in overrides:
        if override_key(line) == "study" and "=" in line:
            value = line.split("=", 1)[1].strip()
            if "," in value or value.startswith(("glob(", "choice(", "range(", "sort(", "shuffle(")):
                return value
    return ""


def grid_applies(overrides: Sequence[str]) -> bool:
    """Whether the preset's grid (``hydra.sweeper.params``) is swept: not for a study of the
    user's own (``study_name=`` given, ``study=`` not), nor for a sweep over presets."""
    keys = given_keys(overrides)
    if _sweeps_presets(overrides):
        return False
    return "study" in keys or "study_name" not in keys


def _is_given(key: str, given: set[str]) -> bool:
    """``imbalance.delay_ms`` is given by ``imbalance.delay_ms=...`` or by ``imbalance=...``."""
    parts = key.split(".")
    return any(".".join(parts[:i]) in given for i in range(1, len(parts) + 1))


def flat_settings(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A study file's settings as dotted keys, without its ``hydra:`` block, ``defaults`` and
    ``study_name`` (the study's name is not a setting it passes on)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if not prefix and key in ("hydra", "defaults", "study_name"):
            continue
        if isinstance(value, Mapping) and value:
            out.update(flat_settings(value, f"{name}."))
        else:
            out[name] = value
    return out


def preset_file(config: DictConfig, name: str) -> Path | None:
    """The study file Hydra read for ``study=name``: the first config source that has it."""
    sources = OmegaConf.select(config, "hydra.runtime.config_sources") or []
    for source in sources:
        schema, path = source.get("schema"), source.get("path")
        try:
            if schema == "file" and path:
                candidate = Path(path) / "study" / f"{name}.yaml"
            elif schema == "pkg" and path and not str(path).startswith("hydra"):
                candidate = Path(str(importlib.resources.files(str(path)))) / "study" / f"{name}.yaml"
            else:
                continue
        except (ModuleNotFoundError, TypeError):
            continue
        if candidate.is_file():
            return candidate
    return None


def _shown(value: Any, width: int = 40) -> str:
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


@dataclass
class PresetUse:
    """The preset a sweep is built on and what of it applies."""
    name: str
    path: str                                                 # as the lines show it
    own_study: bool                                           # study_name= without study=: no grid from it
    settings: dict[str, Any] = field(default_factory=dict)    # the preset's settings the command line left
    swept: dict[str, str] = field(default_factory=dict)       # the preset's grid axes that apply (not given)
    not_swept: dict[str, str] = field(default_factory=dict)   # its grid, not applied (a study of the user's own)
    presets_swept: str = ""                                   # study=a,b / glob(...): each job its preset's

    def settings_text(self, most: int = 8) -> str:
        shown = [f"{k}={_shown(v)}" for k, v in self.settings.items()]
        if len(shown) > most:
            shown = shown[:most] + [f"and {len(shown) - most} more (in its file)"]
        return " ".join(shown) or "none"

    def grid_text(self, grid: Mapping[str, str]) -> str:
        return " ".join(f"{k}={v}" for k, v in grid.items())

    def headline(self) -> str:
        """For a real sweep's first line: the axes the preset swept ("" where none)."""
        if not self.swept:
            return ""
        return f" ({' x '.join(self.swept)} swept by the {self.name} preset)"

    def lines(self, study: str, grid: bool = True) -> list[str]:
        """What the dry run's summary says of the preset (and a real sweep once it has started;
        ``grid=False``: not the axes it swept, which the sweep's first line names)."""
        if self.presets_swept:
            return [f"study {study}: a sweep over presets (study={self.presets_swept}): each job takes its own "
                    "preset's settings; no preset's grid is swept"]
        source = f"the {self.name} preset ({self.path})"
        settings = f"its settings apply where the command line sets none: {self.settings_text()}" \
            if self.settings else "the command line sets every setting it has"
        out = []
        if self.own_study:
            out.append(f"study {study}: a study of your own, built on {source}: {settings}")
            if self.not_swept:
                out.append(f"not swept: the preset's grid ({self.grid_text(self.not_swept)}): a study of your own "
                           f"sweeps only what you sweep (add study={self.name} to sweep that grid too)")
            return out
        if study != self.name:
            out.append(f"study {study}: built on {source}: {settings}")
        else:
            out.append(f"settings from {source}: {self.settings_text()}" if self.settings else
                       f"{source}: {settings}")
        if self.swept and grid:
            out.append(f"swept by the {self.name} preset (not by this command line): {self.grid_text(self.swept)} "
                       "(KEY=VALUE fixes one)")
        return out


def preset_use(config: DictConfig) -> PresetUse | None:
    """What the sweep of ``config`` takes from its preset (None: no preset, or its file not found)."""
    name = OmegaConf.select(config, "hydra.runtime.choices.study")
    if not name:
        return None
    overrides = list(OmegaConf.select(config, "hydra.overrides.task") or [])
    given = given_keys(overrides)
    path = preset_file(config, str(name))
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            raw = {}
    grid = {str(k): str(v) for k, v in ((raw.get("hydra") or {}).get("sweeper") or {}).get("params", {}).items()} \
        if isinstance(raw.get("hydra"), Mapping) else {}
    if _sweeps_presets(overrides):
        return PresetUse(name=str(name), path="", own_study=False, presets_swept=_sweeps_presets(overrides))
    own = not grid_applies(overrides)
    remaining = {k: v for k, v in grid.items() if not _is_given(k, given)}
    # a setting the grid sweeps is the grid's, where the grid applies
    settings = {k: v for k, v in flat_settings(raw).items() if not _is_given(k, given) and (own or k not in grid)}
    shown = str(path) if path is not None else f"study/{name}.yaml"
    if path is not None:
        shipped = Path(__file__).resolve().parent / "conf" / "study"
        if path.resolve().parent == shipped:
            shown = f"{SHIPPED}/{path.name}"
        else:
            try:
                shown = str(path.resolve().relative_to(Path.cwd().resolve()))
            except ValueError:
                shown = str(path)
    return PresetUse(name=str(name), path=shown, own_study=own, settings=settings,
                     swept={} if own else remaining, not_swept=remaining if own else {})
