"""What of the user's leaves with an artifact, and what does not: accounts (unless asked), the
database password in a recorded command, the places the runs ran (run folders relative to the
study's runs' root, the driver and hosts by role, unless asked). The artifact (``artifact``) packs
what these functions leave."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select, update

from results_db.store.connect import scrub
from results_db.store.schema import Run

ACCOUNT_KEYS = ("account",)


def scrub_run(with_accounts: bool, root: str | None = None):
    def rewrite(row: dict[str, Any]) -> dict[str, Any]:
        config = dict(row.get("config") or {})
        if not with_accounts:
            for key in ACCOUNT_KEYS:
                if config.get(key) is not None:
                    config[key] = None
            spec = dict(row.get("spec") or {})
            for key in ACCOUNT_KEYS:
                spec.pop(key, None)
            row["spec"] = spec
        row["config"] = config
        row["environment"] = shareable_environment(row.get("environment"), with_accounts, root)
        return row
    return rewrite


RUNS_ROOT = "<runs>"   # the study's run folders' common root, as packed files name it


def shareable_command(command: str, with_accounts: bool, root: str | None = None) -> str:
    """A recorded sweep command fit to leave the site: no database password, no path under the
    study's runs' ``root`` (``hydra.sweep.dir=<runs>/orig``), and no account (``account=PROJECT`` and
    ``+account=...`` words) unless the packer asked for them."""
    command = scrub(command, _url_in(command))
    if root:
        command = command.replace(root, RUNS_ROOT)
    if with_accounts:
        return command
    try:
        words = shlex.split(command)   # recorded with shlex.join: a quoted value is one word
    except ValueError:
        words = command.split()

    def shared(word: str) -> str:
        key, sep, _ = word.partition("=")
        return f"{key}=<left out>" if sep and key.lstrip("+~") in ACCOUNT_KEYS else word

    return shlex.join(shared(w) for w in words)


def shareable_environment(environment, with_accounts: bool, root: str | None = None):
    if not isinstance(environment, dict):
        return environment
    env = dict(environment)
    if env.get("command"):
        env["command"] = shareable_command(env["command"], with_accounts, root)
    if root:   # the driver's host by its role, as the database's ``driver`` column
        for key in ("host", "login_host"):
            if env.get(key):
                env[key] = "driver"
    return env


def _url_in(text: str) -> str | None:
    for word in text.split():
        if "://" in word:
            return word.split("=", 1)[-1]
    return None


def places(runs) -> tuple[str | None, dict[str, str]]:
    """The study's run folders' common root (run folders are packed relative to it) and each host
    by role: ``node0``, ``node1``, ... in the order the runs first name them (issue 62: the working
    folder, a project's path on a shared file system and the hosts left with the artifact)."""
    folders = [str(d) for d in runs["run_dir"].dropna()] if "run_dir" in runs else []
    root = None
    if folders:
        root = os.path.commonpath([os.path.dirname(f) for f in folders]) if len(folders) > 1 else os.path.dirname(folders[0])
        if len(Path(root).parts) < 3:   # "/" or "/scratch": too short to replace in text without harm
            root = None
    hosts: dict[str, str] = {}
    for value in (runs["hosts"].dropna() if "hosts" in runs else []):
        for host in str(value).split(","):
            hosts.setdefault(host.strip(), f"node{len(hosts)}")
    return root, hosts


# what a run records of where it ran, beside its own columns: scrubbed as text (``text_scrubber``).
# Not its spec and config: a path they name (a script, a data set) is what a re-run needs.
RECORDED = ("versions", "binding", "metrics", "error", "output_tail", "energy_note", "peak_source")


def _scrubbed(value, scrub_text):
    if value is None or scrub_text is None:
        return value
    if isinstance(value, str):
        return scrub_text(value)
    return json.loads(scrub_text(json.dumps(value)))


def scrub_places(target: Engine, root: str | None, hosts: dict[str, str], scrub_text=None) -> None:
    """In the artifact's database: run folders relative to the study's root, the driver by its role,
    hosts by role (``places``), in the runs and the per-rank summaries; what the runs recorded of
    their places (``RECORDED``, the summaries) through ``scrub_text``."""
    from results_db.store.schema import RankSummary

    with target.begin() as conn:
        for run_id, run_dir, driver, run_hosts, environment, *recorded in conn.execute(
                select(Run.id, Run.run_dir, Run.driver, Run.hosts, Run.environment,
                       *(getattr(Run, c) for c in RECORDED))).all():
            values: dict[str, Any] = {"driver": "driver" if driver else driver}
            values.update({c: _scrubbed(v, scrub_text) for c, v in zip(RECORDED, recorded)})
            if run_dir and root:
                values["run_dir"] = os.path.relpath(run_dir, root)
            if run_hosts:
                values["hosts"] = ",".join(hosts.get(h.strip(), "node?") for h in str(run_hosts).split(","))
            if isinstance(environment, dict) and environment.get("host"):
                values["environment"] = {**environment, "host": "driver"}
            conn.execute(update(Run).where(Run.id == run_id).values(**values))
        for host, role in hosts.items():
            conn.execute(update(RankSummary).where(RankSummary.host == host).values(host=role))
        if scrub_text is not None:
            for ident, summary in conn.execute(select(RankSummary.id, RankSummary.summary)).all():
                conn.execute(update(RankSummary).where(RankSummary.id == ident)
                             .values(summary=_scrubbed(summary, scrub_text)))


def _install_places() -> list[tuple[str, str]]:
    """Where scalestudy and its Python are installed (on a site: the user's home or a project's
    file system), by what they are."""
    import sys

    project = Path(__file__).resolve().parents[2]   # the checkout: results_db/publish/ is two below it
    return [(str(project), "<scalestudy>"), (sys.prefix, "<python-env>"), (sys.base_prefix, "<python>")]


def text_scrubber(root: str | None, hosts: dict[str, str]):
    """A function that takes the user's places out of a packed text file (a run's launch line, log,
    per-rank records): the runs' root, scalestudy's and Python's installation, the home folder,
    the user's name as a path component, and each host by its role (``places``; the host the
    packer runs on, where no run names it, as "driver")."""
    import getpass
    import re
    import socket

    pairs = [(root, RUNS_ROOT)] if root else []
    pairs += _install_places()
    home = os.path.expanduser("~")
    pairs.append((home, "~"))
    pairs = sorted({(a, b) for a, b in pairs if a and len(Path(a).parts) >= 2}, key=lambda p: -len(p[0]))
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = None
    names = dict(hosts)
    names.setdefault(socket.gethostname(), "driver")
    host_re = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(h) for h in sorted(names, key=len, reverse=True)
                                                       if h) + r")(?![\w-])") if names else None
    user_re = re.compile(r"(?<=/)" + re.escape(user) + r"(?=/|\b)") if user else None

    def scrub_text(text: str) -> str:
        for place, shown in pairs:
            text = text.replace(place, shown)
        if user_re is not None:
            text = user_re.sub("<user>", text)
        if host_re is not None:
            text = host_re.sub(lambda m: names[m.group(1)], text)
        return text
    return scrub_text
