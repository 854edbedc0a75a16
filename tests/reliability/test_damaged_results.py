"""Damaged results: a run folder whose metrics are cut off, corrupt, of a newer schema, or
missing. ``scalestudy ingest`` says what is wrong in one line, marks that run ``partial``
(every whole record kept) or ``failed`` (nothing of it kept) with the reason, and leaves
every other row of the database as it was.

The folders are copies of one real 2-rank run (``finished_run``), damaged the way a
killed writer, a full disk or a newer scalestudy would leave them."""

from __future__ import annotations

import json
import shutil

import pytest
from sqlalchemy import MetaData, select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run, Step

from conftest import scalestudy


def _copy(finished_run, dest, seed: int):
    shutil.copytree(finished_run, dest)
    spec = json.loads((dest / "spec.json").read_text())
    spec["seed"] = seed        # a run of its own (run_key)
    (dest / "spec.json").write_text(json.dumps(spec))
    return dest


def _cut_last_line(d):
    path = d / "metrics" / "rank-1.jsonl"
    data = path.read_bytes().rstrip(b"\n")
    path.write_bytes(data[: len(data) - 25])      # a writer killed mid-line


def _edit_line(d, rank: int, edit) -> None:
    """Replace one line of a rank's metrics file: ``edit(lines)`` returns (index, new text)."""
    path = d / "metrics" / f"rank-{rank}.jsonl"
    lines = path.read_text().splitlines()
    i, text = edit(lines)
    lines[i] = text
    path.write_text("\n".join(lines) + "\n")


def _garbage_mid_file(d):
    _edit_line(d, 0, lambda lines: (3, '{"type": "step", "schema": 1, "step": 2, "ep'))


def _binary(d):
    (d / "metrics" / "rank-0.jsonl").write_bytes(bytes(range(256)) * 4)


def _newer_metrics_schema(d):
    _edit_line(d, 1, lambda lines: (1, lines[1].replace('"schema":1', '"schema":7')
                                       .replace('"schema": 1', '"schema": 7')))


def _newer_result_schema(d):
    result = json.loads((d / "result.json").read_text())
    result["schema"] = 3
    (d / "result.json").write_text(json.dumps(result))


def _corrupt_result(d):
    (d / "result.json").write_text('{"schema": 1, "status": "do')


def _not_an_object(d):
    _edit_line(d, 0, lambda lines: (3, "123"))


def _step_without_its_number(d):
    def edit(lines):
        i = next(i for i, line in enumerate(lines) if '"type":"step"' in line.replace(" ", ""))
        rec = json.loads(lines[i])
        del rec["step"]
        return i, json.dumps(rec)

    _edit_line(d, 1, edit)


def _no_metrics(d):
    shutil.rmtree(d / "metrics")


DAMAGE = {
    # name: (damage, status, words of the one line and of the stored reason)
    "cut_off_last_line": (_cut_last_line, "partial", "metrics cut off mid-line in rank-1.jsonl"),
    "garbage_mid_file": (_garbage_mid_file, "failed", "rank-0.jsonl:4: not valid JSON"),
    "binary_junk": (_binary, "failed", "rank-0.jsonl:1: not valid JSON"),
    "newer_metrics_schema": (_newer_metrics_schema, "failed", "metrics schema 7 is not supported"),
    "newer_result_schema": (_newer_result_schema, "failed", "result schema 3 is not supported"),
    "corrupt_result": (_corrupt_result, "failed", "result.json: not valid JSON"),
    "no_metrics": (_no_metrics, "failed", "no rank-*.jsonl files"),
    "not_an_object": (_not_an_object, "failed", "rank-0.jsonl:4: not a JSON object"),
    "step_without_its_number": (_step_without_its_number, "failed", "rank-1.jsonl: a record lacks or mistypes"),
}


def _rows(engine, leave_out: int | None):
    """Every row of every table, except those of run ``leave_out``."""
    meta = MetaData()
    meta.reflect(engine)
    out = {}
    with engine.connect() as conn:
        for name, table in meta.tables.items():
            rows = conn.execute(select(table)).mappings().all()
            key = "id" if name == "runs" else "run_id"
            out[name] = sorted((tuple(sorted((k, repr(v)) for k, v in r.items())) for r in rows
                                if key not in r or r[key] != leave_out))
    return out


@pytest.fixture
def seeded(tmp_path, finished_run):
    """A database holding one good, ingested run."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    good = _copy(finished_run, tmp_path / "good", seed=100)
    proc = scalestudy("ingest", str(good), "--db", url, cwd=tmp_path)
    assert proc.returncode == 0 and "1 ingested" in proc.stdout, proc.stdout + proc.stderr
    return url


@pytest.mark.parametrize("kind", list(DAMAGE))
@pytest.mark.sweep
def test_damaged_results_are_one_line_and_touch_nothing_else(tmp_path, finished_run, seeded, kind):
    damage, status, words = DAMAGE[kind]
    folder = _copy(finished_run, tmp_path / kind, seed=200)
    damage(folder)
    engine = connect(seeded)
    before = _rows(engine, leave_out=None)

    proc = scalestudy("ingest", str(folder), "--db", seeded, cwd=tmp_path)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if str(folder) in line]
    assert len(lines) == 1, proc.stdout
    assert words in lines[0] and lines[0].split()[0] == ("partial" if status == "partial" else "fail"), proc.stdout
    assert proc.returncode == (0 if status == "partial" else 1), proc.stdout + proc.stderr

    with Session(engine) as s:
        [run] = s.scalars(select(Run).where(Run.seed == 200)).all()
        steps = s.scalar(select(Step.id).where(Step.run_id == run.id).limit(1))
    assert run.status == status and words in run.error, (run.status, run.error)
    if status == "failed":
        assert steps is None            # all or nothing: a failed ingestion keeps no part of it
    else:
        assert steps is not None        # partial: every whole record
    assert _rows(engine, leave_out=run.id) == before, "rows of other runs changed"

    # ingesting the same folder again: the same answer, no second run, nothing added
    steps_before = _step_count(engine, run.id)
    again = scalestudy("ingest", str(folder), "--db", seeded, cwd=tmp_path)
    assert again.returncode == proc.returncode
    with Session(engine) as s:
        assert len(s.scalars(select(Run).where(Run.seed == 200)).all()) == 1
    assert _step_count(engine, run.id) == steps_before
    assert _rows(engine, leave_out=run.id) == before


def _step_count(engine, run_id: int) -> int:
    from sqlalchemy import func

    with Session(engine) as s:
        return s.scalar(select(func.count()).select_from(Step).where(Step.run_id == run_id))


def test_a_run_folder_without_result_is_left_alone(tmp_path, finished_run, seeded):
    folder = _copy(finished_run, tmp_path / "unfinished", seed=300)
    (folder / "result.json").unlink()
    engine = connect(seeded)
    before = _rows(engine, leave_out=None)
    proc = scalestudy("ingest", str(folder), "--db", seeded, cwd=tmp_path)
    assert proc.returncode == 0 and f"{folder}: not finished (no result.json)" in proc.stdout
    assert _rows(engine, leave_out=None) == before   # perhaps still running: not marked anything
