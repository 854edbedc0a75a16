"""Reference pages written from the code's own declarations: the sweep keys from
``workloads/spec.py`` through ``orchestrator/sweep/schema.key_help``, every command's options
from its own argparse parser (its ``--help``), the site-file schema from ``SiteConfig`` and the
commented template, the results columns from ``query --list-columns``. Nothing here is typed
twice: rename an option and the reference follows, and a page that links to the old name fails
the strict build (tests/project/test_docs.py).

The reference pages and the benchmarks page (``REFERENCE``) are committed under ``docs/``, so
that the links to them work where the Markdown is read (a clone, the repository's web view), not
only in the built site: ``python docs/gen/reference.py`` rewrites them, and tests/project/test_docs.py
fails when one is not what this writes (the benchmarks page: after an edit of
``benchmarks/RESULTS.md``'s current figures). Nothing is written at build time: the site is
built from the committed pages alone."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import sys
from pathlib import Path

import yaml

from orchestrator.cli import COMMANDS, USAGE, main
from orchestrator.cli.model_cmd import ACTIONS as MODEL_ACTIONS
from orchestrator.site.config import SiteConfig, known_sites, load_site, site_dir
from orchestrator.sweep.schema import key_help
from workloads.registry import ALGORITHMS, DATASETS, MODELS

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = {"model": tuple(MODEL_ACTIONS)}   # commands whose actions have parsers of their own
HELP_COLUMNS = 100   # the width the commands' --help is written at
# SiteConfig fields a site file does not set (orchestrator/site/config.py refuses them in YAML)
INTERNAL_SITE_FIELDS = ("name", "queue_pinned")
FIELD_NAMES = {f.name for f in dataclasses.fields(SiteConfig)}


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)   # argparse wraps to the terminal: the same page on any
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                main(argv)
            except SystemExit:
                pass
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return out.getvalue().rstrip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _shown(default) -> str:
    if default == "???":
        return "(required)"
    return f"`{default!r}`" if isinstance(default, str) else f"`{default}`"


def sweep_keys() -> str:
    lines = ["# Sweep keys", "",
             "Every key a sweep takes (`KEY=VALUE`, or `KEY=V1,V2,...` to sweep it), with its default. "
             "This page is generated from the declarations the code reads (`workloads/spec.py`, "
             "`orchestrator/sweep/schema.py`); `scalestudy sweep --help` prints the same.", "",
             "| key | default | meaning |", "|---|---|---|"]
    for key, default, text in key_help():
        lines.append(f"| `{key}` | {_shown(default)} | {_cell(text)} |")
    lines += ["", "Free parameters: `+params.NAME=V1,V2` adds and sweeps one; it is part of the run's "
              "identity, passed to your factories and queryable (`--where params.NAME=V`).", "",
              f"**Algorithms**: {', '.join(f'`{a}`' for a in ALGORITHMS)}.  ",
              f"**Models**: {', '.join(f'`{m}`' for m in MODELS)}, or `model=package.module:factory`.  ",
              f"**Data sets**: {', '.join(f'`{d}`' for d in DATASETS)}, or `dataset=package.module:factory`.", "",
              "**Studies shipped** (`study=NAME`): "
              + ", ".join(f"`{p.stem}`" for p in sorted((ROOT / "orchestrator/sweep/conf/study").glob("*.yaml")))
              + ".", "", "**Sites shipped** (`site=NAME`, or `site=/path/site.yaml`):", "",
              "| site | scheduler | MPI launcher | description |", "|---|---|---|---|"]
    for name in known_sites():
        site = load_site(name)
        lines.append(f"| `{name}` | {site.provider} | {site.mpi_launcher} | {site.description} |")
    return "\n".join(lines) + "\n"


def cli() -> str:
    lines = ["# Commands", "",
             "Each command's options as its own parser prints them (`scalestudy COMMAND --help`), "
             f"written by `python docs/gen/reference.py` on Python {python_version()} (another Python's argparse "
             "lays its help out a little differently).", "", "```text", USAGE.rstrip(), "```", ""]
    for name in COMMANDS:
        lines += [f"## scalestudy {name}", "", "```text", _help([name, "--help"]), "```", ""]
        for action in ACTIONS.get(name, ()):   # a command of actions: each action's own options
            lines += [f"### scalestudy {name} {action}", "", "```text", _help([name, action, "--help"]), "```", ""]
    return "\n".join(lines)


def _template_comments() -> dict[str, str]:
    """Each key of the commented template with the prose comment just above it. The file's
    opening comment is its own header, and commented-out examples (``# nccl_network:`` and its
    indented lines) are not prose: a top-level one names the key the prose above it is for."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    header = True
    for line in (site_dir() / "template.yaml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            content = stripped[1:]
            top = re.match(r"^ ?([a-z_]+):(\s|$)", content)
            example = (top and top.group(1) in FIELD_NAMES) or re.match(r"^ {2,}\S|^ ?- ", content)
            if example:
                key = content.strip().split(":", 1)[0]
                if not content.startswith("  ") and key and key not in comments and pending:
                    comments[key] = " ".join(pending)
                pending = []
            elif not header:
                pending.append(content.strip())
        elif line and not line.startswith((" ", "-")) and ":" in line:
            header = False
            key = line.split(":", 1)[0]
            comments.setdefault(key, " ".join(p for p in pending if p))
            pending = []
        else:
            header = header and not stripped
            pending = []
    return comments


def _yaml_type(annotation: str) -> str:
    """What a site file writes for a field, in YAML's words rather than Python's."""
    words = {"str": "string", "int": "integer", "bool": "true / false", "tuple[str, ...]": "list of strings",
             "tuple[tuple[str, str], ...]": "mapping of names to values",
             "tuple[QueueLimits, ...]": "mapping of queue names to limits"}
    if annotation in words:
        return words[annotation]
    if annotation.endswith("| None"):
        return "mapping (optional)"
    return annotation


def site_schema() -> str:
    comments = _template_comments()
    template = yaml.safe_load((site_dir() / "template.yaml").read_text())
    lines = ["# Site files", "",
             "A site file (`site_configs/NAME.yaml`, or any path given as `site=/path/file.yaml`) says how "
             "a machine is reached and what it allows. It is validated in full when it is loaded; an unknown "
             "key or a missing required value is refused before anything is submitted. Generated from "
             "`SiteConfig` (`orchestrator/site/config.py`) and the commented template "
             "`site_configs/template.yaml`.", "",
             "| key | type | default | in the template |", "|---|---|---|---|"]
    for f in dataclasses.fields(SiteConfig):
        if f.name in INTERNAL_SITE_FIELDS:
            continue
        if f.default is not dataclasses.MISSING:
            default = f"`{f.default!r}`"
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = "`[]`"
        else:
            default = "(required)"
        note = comments.get(f.name, "")
        if f.name in template and "`" not in str(template[f.name]):
            note = (note + f" e.g. `{template[f.name]!r}`").strip()
        type_name = _yaml_type(str(f.type))
        lines.append(f"| `{f.name}` | {type_name} | {default} | {_cell(note)} |")
    lines += ["", "## The template", "", "```yaml", (site_dir() / "template.yaml").read_text().rstrip(), "```", ""]
    return "\n".join(lines)


def columns() -> str:
    names = _help(["query", "--list-columns"]).split()
    return "\n".join(["# Result columns", "",
                      "The columns `scalestudy query` and `results_db.store.query` return "
                      "(`scalestudy query --list-columns`; `--columns A,B` picks some).", "",
                      *(f"- `{n}`" for n in names), ""])


HISTORY = "\n## History\n"   # where benchmarks/RESULTS.md's current figures end and their history begins


def benchmarks() -> str:
    """Today's figures: the first part of ``benchmarks/RESULTS.md`` as it is in the repository (the
    figures live in one place); the history of how each was reached stays in the file."""
    results = (ROOT / "benchmarks/RESULTS.md").read_text()
    current, found, _ = results.partition(HISTORY)
    if not found:
        raise SystemExit(f"benchmarks/RESULTS.md: no {HISTORY.strip()!r} heading after its current figures")
    return ("# Benchmarks\n\nThe project's current figures, each with its spread, the baseline it was measured "
            "beside (interleaved, in one run), the command that measured it and the date: the first part of "
            "`benchmarks/RESULTS.md`, shown here as it is in the repository.\n\n"
            + current.split("\n", 1)[1].rstrip() + "\n\n## How each figure was reached\n\n"
            "The runs before each figure, what changed, the figures it superseded and its caveats are the second "
            "part of `benchmarks/RESULTS.md` (History), with every run's log in `benchmarks/logs/`.\n")


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


# committed under docs/ (readable where the Markdown is hosted), checked by tests/project/test_docs.py
REFERENCE = {"reference/sweep-keys.md": sweep_keys, "reference/commands.md": cli,
             "reference/site-files.md": site_schema, "reference/columns.md": columns,
             "benchmarks.md": benchmarks}
GENERATED = "<!-- Generated by docs/gen/reference.py from the code's declarations (this page's figures: from " \
            "benchmarks/RESULTS.md): edit those, then run `python docs/gen/reference.py`. -->\n\n"


def reference_pages() -> dict[str, str]:
    """Each committed reference page's text, as this file writes it."""
    return {path: GENERATED + make() for path, make in REFERENCE.items()}


def write_reference(docs: Path = ROOT / "docs") -> list[Path]:
    written = []
    for path, text in reference_pages().items():
        target = docs / path
        target.write_text(text)
        written.append(target)
    return written


if __name__ == "__main__":   # python docs/gen/reference.py: rewrite the committed reference pages
    for written in write_reference():
        print(f"wrote {written.relative_to(ROOT)}")
