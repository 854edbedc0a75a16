"""Reference pages written at build time from the code's own declarations (mkdocs-gen-files):
the sweep keys from ``workloads/spec.py`` through ``orchestrator/sweep/schema.key_help``, every
command's options from its own argparse parser (its ``--help``), the site-file schema from
``SiteConfig`` and the commented template, the results columns from ``query --list-columns``.
Nothing here is typed twice: rename an option and the reference follows, and a page that links
to the old name fails the strict build (tests/test_docs.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from pathlib import Path

import mkdocs_gen_files
import yaml

from orchestrator.cli import COMMANDS, USAGE, main
from orchestrator.site.config import SiteConfig, known_sites, load_site, site_dir
from orchestrator.sweep.schema import key_help
from workloads.registry import ALGORITHMS, DATASETS, MODELS

ROOT = Path(__file__).resolve().parents[2]
# SiteConfig fields a site file does not set (orchestrator/site/config.py refuses them in YAML)
INTERNAL_SITE_FIELDS = ("name", "queue_pinned")
FIELD_NAMES = {f.name for f in dataclasses.fields(SiteConfig)}


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            main(argv)
        except SystemExit:
            pass
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
             "Each command's options as its own parser prints them (`scalestudy COMMAND --help`); "
             "generated at build time.", "", "```text", USAGE.rstrip(), "```", ""]
    for name in COMMANDS:
        lines += [f"## scalestudy {name}", "", "```text", _help([name, "--help"]), "```", ""]
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
                      "The columns `scalestudy query` and `results_db.query` return "
                      "(`scalestudy query --list-columns`; `--columns A,B` picks some).", "",
                      *(f"- `{n}`" for n in names), ""])


def benchmarks() -> str:
    results = (ROOT / "benchmarks/RESULTS.md").read_text()
    return ("# Benchmarks\n\nEvery measured figure of the project is on this page, each with the command that "
            "measured it: side by side with its baseline in one run, interleaved, at least 5 repeats, "
            "medians (`benchmarks/RESULTS.md`, shown here as it is in the repository).\n\n"
            + results.split("\n", 1)[1])


PAGES = {"reference/sweep-keys.md": sweep_keys, "reference/commands.md": cli,
         "reference/site-files.md": site_schema, "reference/columns.md": columns,
         "benchmarks.md": benchmarks}

for path, make in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(make())
