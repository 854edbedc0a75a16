"""What of the user's leaves with an artifact, and what does not: accounts (unless asked), the
database password in a recorded command, the places the runs ran (run folders relative to the
study's runs' root, the driver and hosts by role, unless asked). The artifact (``artifact``) packs
what these functions leave."""

from __future__ import annotations

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
    if root and env.get("host"):
        env["host"] = "driver"
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


def scrub_places(target: Engine, root: str | None, hosts: dict[str, str]) -> None:
    """In the artifact's database: run folders relative to the study's root, the driver by its role,
    hosts by role (``places``), in the runs and the per-rank summaries."""
    from results_db.store.schema import RankSummary

    with target.begin() as conn:
        for run_id, run_dir, driver, run_hosts, environment in conn.execute(
                select(Run.id, Run.run_dir, Run.driver, Run.hosts, Run.environment)).all():
            values: dict[str, Any] = {"driver": "driver" if driver else driver}
            if run_dir and root:
                values["run_dir"] = os.path.relpath(run_dir, root)
            if run_hosts:
                values["hosts"] = ",".join(hosts.get(h.strip(), "node?") for h in str(run_hosts).split(","))
            if isinstance(environment, dict) and environment.get("host"):
                values["environment"] = {**environment, "host": "driver"}
            conn.execute(update(Run).where(Run.id == run_id).values(**values))
        for host, role in hosts.items():
            conn.execute(update(RankSummary).where(RankSummary.host == host).values(host=role))
