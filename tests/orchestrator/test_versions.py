"""A Parsl or Hydra release outside the range CI tests is refused in one line, before a sweep
records or submits anything (orchestrator/sweep/versions.py).

The "new release" is what pip would leave behind: a ``*.dist-info`` of a later version, first on
the path, so that the installed version the sweep reads is that one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from orchestrator.sweep import versions
from orchestrator.sweep.versions import untested

from conftest import REPO, scalestudy


def _pyproject_range(dist: str) -> str:
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (line,) = [d for d in deps if d.replace("_", "-").startswith(dist + ">") or d.startswith(dist + "<")]
    return line[len(dist):]


def test_the_ranges_are_pyprojects_with_a_floor_and_a_ceiling():
    for dist in ("parsl", "hydra-core"):
        tested = versions.tested_range(dist)
        assert tested is not None and sorted(tested.split(",")) == sorted(_pyproject_range(dist).split(","))
        assert any(p.startswith(">=") for p in tested.split(",")) and any(p.startswith("<") for p in tested.split(","))
        assert untested(dist) is None                   # what this environment runs is in range


def test_a_release_outside_the_range_is_named_with_the_range():
    floor = next(p[2:] for p in versions.tested_range("parsl").split(",") if p.startswith(">="))
    assert untested("parsl", floor) is None
    message = untested("parsl", "2099.1.1")
    assert message is not None and "\n" not in message
    assert message.startswith("parsl 2099.1.1 is installed, but scalestudy is tested with parsl>=")
    assert "pip install 'parsl>=" in message
    assert untested("parsl", "2020.1.1") is not None


def _released(folder: Path, dist: str, version: str) -> Path:
    info = folder / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return folder


def test_a_sweep_on_a_new_parsl_stops_before_recording_or_submitting(tmp_path):
    newer = _released(tmp_path / "newer", "parsl", "2099.1.1")
    db = tmp_path / "r.db"
    proc = scalestudy("sweep", "site=local_slurm", "nodes=1,2", f"db_url=sqlite:///{db}", cwd=tmp_path,
                      env={"PYTHONPATH": str(newer)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert lines[-1].startswith("scalestudy: error: parsl 2099.1.1 is installed, but scalestudy is tested with")
    assert not (tmp_path / "multirun").exists() or not any((tmp_path / "multirun").rglob("spec.json"))
    if db.exists():   # the database may be opened before admission; no run is in it
        assert sqlite3.connect(db).execute("select count(*) from runs").fetchone() == (0,)
    assert not any(tmp_path.rglob("submit_scripts"))        # nothing went to the scheduler


def test_a_sweep_on_a_new_hydra_stops_at_once(tmp_path):
    newer = _released(tmp_path / "newer", "hydra-core", "1.4.0")
    proc = scalestudy("sweep", "nodes=1", f"db_url=sqlite:///{tmp_path / 'r.db'}", cwd=tmp_path,
                      env={"PYTHONPATH": str(newer)})
    assert proc.returncode == 2
    tested = untested_range("hydra-core")
    assert proc.stderr.strip() == ("scalestudy: error: hydra-core 1.4.0 is installed, but scalestudy is tested with "
                                   f"hydra-core{tested} only (pyproject.toml; docs/reference/development.md): "
                                   f"pip install 'hydra-core{tested}'")
    assert not (tmp_path / "r.db").exists()


def untested_range(dist: str) -> str:
    message = untested(dist, "0.0.1")
    return message.split(f"tested with {dist}", 1)[1].split(" only", 1)[0]


def test_the_docs_and_the_docstring_say_what_pyproject_does():
    readme = (REPO / "docs/reference/development.md").read_text()
    doc = versions.__doc__
    for dist, name in (("parsl", "Parsl"), ("hydra-core", "Hydra"), ("omegaconf", "OmegaConf")):
        floor, ceiling = versions.bounds(dist)
        assert floor and ceiling, dist
        assert f"{name} {floor} to {ceiling}" in doc, dist
        if dist != "omegaconf":
            assert f"**{name} {floor} to {ceiling}**" in readme, dist
