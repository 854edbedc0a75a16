"""The documentation cannot rot: the site builds in strict mode (a broken link or anchor, a page
outside the nav, a reference generator that fails), every command of the tutorial runs as
written, and every option a page gives a scalestudy command is one that command's parser has.

The tutorial's commands are read from its pages' ``bash`` blocks and run one by one, in order,
in a fresh folder that holds only the clone's ``examples/`` (as a reader at the clone's root
has it), with ``.venv/bin`` first on PATH (the page's ``source .venv/bin/activate``) and the
database in that folder. Two lines are not run here, and the test says why (they are what the
README's own test command runs first)."""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

DOCS = REPO / "docs"
TUTORIAL = ("tutorial/first-study.md", "tutorial/your-own.md", "tutorial/real-machine.md")
# lines of the tutorial this test does not run, and why
NOT_RUN_HERE = {
    "bash scripts/setup-env.sh": "scripts/test.sh runs it before any test (this suite runs in its .venv)",
    "source .venv/bin/activate": "the test puts .venv/bin first on PATH instead",
}
# MkDocs 1.x and Material print a banner about their successors (ProperDocs, Zensical) on every build
QUIET = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
_FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def bash_lines(page: str) -> list[str]:
    """Each command of a page's ``bash`` blocks (continued lines joined)."""
    text = (DOCS / page).read_text()
    out = []
    for block in _FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def test_the_site_builds_in_strict_mode(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs, "mkdocs is in the test extra (pyproject.toml)"
    proc = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO, env=QUIET,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    # the generated reference is there, and holds what the code declares
    for page in ("reference/sweep-keys/index.html", "reference/commands/index.html",
                 "reference/site-files/index.html", "benchmarks/index.html"):
        assert page in built
    keys = (tmp_path / "site/reference/sweep-keys/index.html").read_text()
    from orchestrator.sweep.schema import key_help
    for key, _, _ in key_help():
        assert f"<code>{key}</code>" in keys, key
    commands = (tmp_path / "site/reference/commands/index.html").read_text()
    assert "--list-columns" in commands and "--baseline" in commands


def _reference_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "gen" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_what_the_code_declares():
    """The reference pages are committed, so that the links to them work where the Markdown is
    read (a clone, the repository's web view): each must be what docs/gen/reference.py writes
    from the code now. The commands page is argparse's help, laid out a little differently by
    each Python: it is compared on the Python that wrote it (its first paragraph says which)."""
    reference = _reference_module()
    stale = []
    for path, text in reference.reference_pages().items():
        committed = (DOCS / path).read_text()
        if path == "reference/commands.md" and f"on Python {reference.python_version()} " not in committed:
            continue
        if committed != text:
            stale.append(path)
    assert not stale, f"{', '.join(stale)}: not what the code declares; `python docs/gen/reference.py` rewrites them"
    # every page the docs link to exists as a file, not only in the built site
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text()):
            if "reference/" in target or target.endswith("benchmarks.md"):
                assert (page.parent / target).resolve().is_file(), f"{page.relative_to(DOCS)} -> {target}"


def test_a_stale_reference_page_is_caught(tmp_path, monkeypatch):
    """The control: a reference page that no longer matches the code is told apart."""
    reference = _reference_module()
    pages = reference.reference_pages()
    monkeypatch.setattr(reference, "key_help", lambda: [("a_new_key", 1, "added since the page was written")])
    assert reference.reference_pages()["reference/sweep-keys.md"] != pages["reference/sweep-keys.md"]


def test_a_broken_link_fails_the_build(tmp_path):
    """The control: strict mode does refuse a page with a dead link (this check can fail)."""
    copy = tmp_path / "repo"
    shutil.copytree(DOCS, copy / "docs")
    for name in ("mkdocs.yml",):
        shutil.copy(REPO / name, copy / name)
    shutil.copytree(REPO / "benchmarks", copy / "benchmarks", ignore=shutil.ignore_patterns("logs"))
    page = copy / "docs/tutorial/your-own.md"
    page.write_text(page.read_text() + "\n[gone](../how-to/no-such-page.md)\n")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    env = {**QUIET, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=copy,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode != 0
    assert "no-such-page.md" in proc.stderr


@functools.lru_cache(maxsize=None)
def _options(command: str, action: str | None = None) -> set[str]:
    """The options ``scalestudy COMMAND [ACTION] --help`` lists (an action of its own, as ``model
    fit``, lists its own; a command without actions answers with its whole help either way)."""
    from orchestrator.cli import main
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            main([command, *([action] if action else []), "--help"])
        except SystemExit:
            pass
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", out.getvalue()))


def _commands_in(text: str):
    for line in re.findall(r"scalestudy ([a-z]+)((?: [^`|\n#]*)?)", text):
        yield line


def test_every_option_the_pages_give_exists():
    """A renamed or removed option breaks the build: each ``--option`` written after
    ``scalestudy COMMAND`` in the README or any page must be in that command's help."""
    from orchestrator.cli import COMMANDS
    missing = []
    for path in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for command, rest in _commands_in(path.read_text()):
            if command not in COMMANDS:
                continue
            first = rest.split()[0] if rest.split() and re.fullmatch(r"[a-z]+", rest.split()[0]) else None
            known = _options(command, first) if first else _options(command)
            for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest):
                if option not in known and option not in ("--hydra-help", "--help"):
                    missing.append(f"{path.relative_to(REPO)}: scalestudy {command} {option}")
    assert not missing, "\n".join(sorted(set(missing)))


def _run_page(page: str, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO)}
    env.pop("SCALESTUDY_DB_URL", None)
    lines = bash_lines(page)
    assert lines, page
    for line in lines:
        if line in NOT_RUN_HERE:
            continue
        proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"{page}: `{line}` exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


@pytest.mark.sweep
def test_the_first_study_runs_as_written(tmp_path):
    _run_page("tutorial/first-study.md", tmp_path)
    assert (tmp_path / "scalestudy.db").exists()
    assert list((tmp_path / "figures/first").glob("*.png"))
    assert (tmp_path / "reports/first/index.html").exists()


@pytest.mark.sweep
def test_your_own_model_and_script_run_as_written(tmp_path):
    _run_page("tutorial/your-own.md", tmp_path)


@pytest.mark.mpi
def test_the_first_real_machine_runs_as_written_on_local_slurm(tmp_path, slurm_cluster):
    _run_page("tutorial/real-machine.md", tmp_path)


def test_the_tutorial_lines_not_run_here_are_the_ones_named():
    """Only the two set-up lines are skipped, and they are on the first page as written."""
    lines = [line for page in TUTORIAL for line in bash_lines(page)]
    assert set(NOT_RUN_HERE) <= set(lines)
    assert shlex.split(lines[0]) == ["bash", "scripts/setup-env.sh"]
