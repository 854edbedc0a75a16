"""A timeline kept as a Parquet file beside the database reads back as the events table would.

Every check ingests the same metrics twice, once into each store (``events_table=True`` forces the
table), and compares what the query API returns; the derived step statistics are also checked
against ``timeline.step_stats`` over the whole frame at once (the ingestion reads windows of steps).
"""

from __future__ import annotations

import json
import shutil
import sys

import pandas as pd
import pytest

from results_db import connect
from results_db.store import event_files, query
from results_db.ingest import event_sink, folder as ingest
from results_db.ingest.folder import IngestError, ingest_run
from results_db.ingest.rank_files import RankFileReader
from results_db.store.runs import PlannedRun, register_runs
from results_db.ingest.timeline import step_stats
from workloads.spec import RunSpec

from conftest import REPO, mpiexec, scalestudy, write_spec

from synthetic_runs import make_metrics_dir


def _ingest(url: str, run_dir, table: bool = False, key: str = "k"):
    engine = connect(url)
    spec = RunSpec.load(run_dir / "spec.json").to_dict() if (run_dir / "spec.json").is_file() else None
    spec = {**(spec or {}), "timeline": True}
    [d] = register_runs(engine, "ev", [PlannedRun(key, spec, str(run_dir))])
    ingest_run(engine, d.run_id, run_dir, events_table=table)
    return engine, d.run_id


def _file(engine, run_id):
    """Where run ``run_id``'s events are, as its database names them (under the database's id)."""
    return event_files.events_dir(engine) / event_files.file_name(run_id, event_files.database_id(engine))


def _same(file_engine, file_id, table_engine, table_id):
    a, b = query.events(file_engine, [file_id]), query.events(table_engine, [table_id])
    assert len(a) and list(a.columns) == list(b.columns) == query.EVENT_COLUMNS
    pd.testing.assert_frame_equal(a.drop(columns="run_id"), b.drop(columns="run_id"), check_dtype=False)
    sa, sb = (query.step_stats(e, [i]).drop(columns=["id", "run_id"]) for e, i in ((file_engine, file_id),
                                                                              (table_engine, table_id)))
    pd.testing.assert_frame_equal(sa, sb, check_dtype=False)
    whole = step_stats(a)   # every step at once, not windowed
    pd.testing.assert_frame_equal(sa.reset_index(drop=True), whole, check_dtype=False)
    for read in (query.collective_skews, query.timeline_counts, query.timeline_sizes):
        x, y = read(file_engine, [file_id]), read(table_engine, [table_id])
        if isinstance(x, pd.DataFrame):
            key = ["step", "collective"]
            pd.testing.assert_frame_equal(x.drop(columns="run_id").sort_values(key, ignore_index=True),
                                          y.drop(columns="run_id").sort_values(key, ignore_index=True),
                                          check_dtype=False)
        else:
            assert list(x.values()) == list(y.values())
    assert query.timeline_step_range(file_engine, file_id) == query.timeline_step_range(table_engine, table_id)
    window = (3, 4)
    pd.testing.assert_frame_equal(query.events(file_engine, [file_id], phases=["allreduce"], steps=window)
                                  .drop(columns="run_id"),
                                  query.events(table_engine, [table_id], phases=["allreduce"], steps=window)
                                  .drop(columns="run_id"), check_dtype=False)


@pytest.mark.sweep
def test_a_real_timeline_run_reads_back_alike_from_its_file_and_from_the_table(tmp_path, monkeypatch):
    """A real 2-rank resnet20 run: its events go to each rank's binary stream (issue 63:
    ``workloads.event_log``), none into the .jsonl, and every reader returns what the events table
    returns; also when each rank's steps are folded as they come (small chunks and folds: the
    real order of the engine's events, some a step late, against the fold)."""
    run_dir = tmp_path / "run"
    spec = write_spec(run_dir, workers_per_node=2, threads_per_node=2, epochs=1, steps_per_epoch=6,
                      model="resnet20", dataset="synthetic_images", timeline=True, fusion_threshold_mb=0.2)
    proc = mpiexec(2, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr
    lines = (run_dir / "metrics" / "rank-0.jsonl").read_bytes().splitlines()
    assert not [raw for raw in lines if b'"type":"event"' in raw]
    assert all((run_dir / "metrics" / f"events-rank-{r}.arrows").stat().st_size > 1000 for r in (0, 1))

    file_engine, file_id = _ingest(f"sqlite:///{tmp_path / 'f.db'}", run_dir)
    table_engine, table_id = _ingest(f"sqlite:///{tmp_path / 't.db'}", run_dir, table=True)
    [name] = query.runs(file_engine, run_ids=[file_id], columns=["events_file"])["events_file"]
    assert name == event_files.file_name(file_id, event_files.database_id(file_engine))
    assert (tmp_path / "f.db.events" / name / "part-00000.parquet").is_file()
    assert query.runs(table_engine, run_ids=[table_id], columns=["events_file"])["events_file"].isna().all()
    with file_engine.connect() as conn:   # nothing went into the table
        from sqlalchemy import text
        assert conn.execute(text("select count(*) from events")).scalar() == 0
    _same(file_engine, file_id, table_engine, table_id)

    from results_db.ingest import rank_events
    from results_db.ingest.timeline import StepStats

    folds = []
    add = StepStats.add
    monkeypatch.setattr(StepStats, "add", lambda self, chunk: (folds.append(len(chunk)), add(self, chunk)))
    monkeypatch.setattr(rank_events, "CHUNK_ROWS", 64)
    monkeypatch.setattr(event_sink, "_FOLD_ROWS", 20)
    folded_engine, folded_id = _ingest(f"sqlite:///{tmp_path / 'folded.db'}", run_dir)
    assert len(folds) > 2, folds   # folded mid-rank, not only at each rank's end
    _same(folded_engine, folded_id, table_engine, table_id)


def test_many_windows_and_hand_formatted_lines_give_the_same_statistics(tmp_path, monkeypatch):
    """Windows of a few steps (the 256-rank case in small), and event lines another writer
    formatted (spaces after the separators: the slow path, into the same file)."""
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=3, steps=40, events_per_step=25)
    path = run_dir / "metrics" / "rank-1.jsonl"
    path.write_text("".join(json.dumps(json.loads(line)) + "\n" for line in path.read_text().splitlines()))
    monkeypatch.setattr(ingest, "_DERIVE_ROWS", 500)   # ~6 steps a window
    file_engine, file_id = _ingest(f"sqlite:///{tmp_path / 'f.db'}", run_dir)
    table_engine, table_id = _ingest(f"sqlite:///{tmp_path / 't.db'}", run_dir, table=True)
    _same(file_engine, file_id, table_engine, table_id)
    assert sorted(query.events(file_engine, [file_id])["rank"].unique()) == [0, 1, 2]


def test_the_folder_is_the_variables_or_beside_the_database_and_postgresql_without_it_uses_the_table(
        tmp_path, monkeypatch, postgres_url):
    from conftest import _fresh_postgres

    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=8, events_per_step=5)
    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    _fresh_postgres(postgres_url)
    pg, pg_id = _ingest(postgres_url, run_dir)
    assert event_files.events_dir(pg) is None and not query.event_files_of(pg, [pg_id])
    assert query.timeline_sizes(pg, [pg_id])[pg_id] == 2 * 8 * (4 + 5 + 1)

    monkeypatch.setenv(event_files.EVENTS_DIR_ENV, str(tmp_path / "shared-events"))
    pg2, pg2_id = _ingest(postgres_url, run_dir, key="k2")
    assert (tmp_path / "shared-events" / event_files.file_name(pg2_id, event_files.database_id(pg2))).is_dir()
    _same(pg2, pg2_id, pg, pg_id)

    sqlite, sqlite_id = _ingest(f"sqlite:///{tmp_path / 's.db'}", run_dir)
    assert _file(sqlite, sqlite_id) == tmp_path / "shared-events" / event_files.file_name(
        sqlite_id, event_files.database_id(sqlite)) and _file(sqlite, sqlite_id).is_dir()   # the variable wins
    assert not (tmp_path / "s.db.events").exists()


def test_a_database_moved_with_its_folder_reads_and_a_lost_file_is_said_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=6, events_per_step=5)
    engine, run_id = _ingest(f"sqlite:///{tmp_path / 'a.db'}", run_dir)
    engine.dispose()
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(tmp_path / "a.db", moved / "b.db")
    shutil.move(tmp_path / "a.db.events", moved / "b.db.events")
    engine = connect(f"sqlite:///{moved / 'b.db'}")
    assert len(query.events(engine, [run_id])) == 2 * 6 * (4 + 5 + 1)
    shutil.rmtree(moved / "b.db.events" / query.event_files_of(engine, [run_id])[run_id])
    with pytest.raises(event_files.EventFileError, match=f"run {run_id}: its timeline file .* is missing"):
        query.events(engine, [run_id])


@pytest.mark.parametrize("damage, message", [
    (lambda rec: rec.pop("t0"), r"rank-1.jsonl:\d+: a record lacks or mistypes a field .*\(t0\)"),
    (lambda rec: rec.update(step="three"), r"rank-1.jsonl:\d+: a record lacks or mistypes a field .*\(step\)"),
])
def test_a_bad_event_line_is_named_and_leaves_nothing_behind(tmp_path, monkeypatch, damage, message):
    """A damaged event in the middle of a rank file (the fast path's C++ reader finds it; the
    line is then named as the slow path names it), nothing stored, no file left over."""
    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=10, events_per_step=5)
    path = run_dir / "metrics" / "rank-1.jsonl"
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"phase":"grad_ready"' in line and i > 40)
    rec = json.loads(lines[at])
    damage(rec)
    lines[at] = json.dumps(rec, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")
    engine = connect(f"sqlite:///{tmp_path / 'x.db'}")
    [d] = register_runs(engine, "ev", [PlannedRun("k", {**RunSpec.load(run_dir / "spec.json").to_dict(),
                                                         "timeline": True}, str(run_dir))])
    with pytest.raises(IngestError, match=message) as caught:
        ingest_run(engine, d.run_id, run_dir)
    assert f":{at + 1}:" in str(caught.value) and "\n" not in str(caught.value)
    assert [p for p in (tmp_path / "x.db.events").rglob("*") if not p.is_dir()] == []
    assert list((tmp_path / "x.db.events").rglob("*run-*")) == []
    assert query.runs(engine, run_ids=[d.run_id], columns=["status"])["status"].tolist() == ["pending"]


def test_a_run_cut_off_mid_event_keeps_every_whole_event(tmp_path, monkeypatch):
    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=5, events_per_step=5)
    path = run_dir / "metrics" / "rank-0.jsonl"
    lines = path.read_text().splitlines()[:-1]   # no run_end: killed while writing an event
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:30])
    engine, run_id = _ingest(f"sqlite:///{tmp_path / 'c.db'}", run_dir)
    events = query.events(engine, [run_id])
    whole = sum('"type":"event"' in line for line in lines[:-1])
    assert (events["rank"] == 0).sum() == whole and (events["rank"] == 1).sum() == 5 * (4 + 5 + 1)
    assert query.runs(engine, run_ids=[run_id], columns=["status"])["status"].tolist() == ["partial"]


def test_a_killed_ingestions_temporary_file_is_removed_by_the_next_and_a_live_ones_is_not(tmp_path, monkeypatch):
    """An ingestion killed mid-write (SIGKILL: no ``discard``) leaves ``.run-N.parquet.PID.tmp/``;
    the next ingestion of that run removes it when PID is gone, and leaves a live writer's alone."""
    import subprocess

    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=4, events_per_step=5)
    engine = connect(f"sqlite:///{tmp_path / 'k.db'}")
    [d] = register_runs(engine, "ev", [PlannedRun("k", {**RunSpec.load(run_dir / "spec.json").to_dict(),
                                                         "timeline": True}, str(run_dir))])
    folder = tmp_path / "k.db.events" / event_files.database_id(engine)
    folder.mkdir(parents=True)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead_tmp = folder / f".run-{d.run_id}.parquet.{int(gone.stdout)}.tmp"
        live_tmp = folder / f".run-{d.run_id}.parquet.{live.pid}.tmp"
        other_run = folder / f".run-{d.run_id + 1}.parquet.{int(gone.stdout)}.tmp"
        for p in (dead_tmp, live_tmp, other_run):
            p.mkdir()
            (p / event_files.part_name(0)).write_bytes(b"half a file")
        ingest_run(engine, d.run_id, run_dir)
        assert not dead_tmp.exists() and live_tmp.exists() and other_run.exists()
        assert (folder / f"run-{d.run_id}.parquet" / event_files.part_name(0)).is_file()
    finally:
        live.kill()
        live.wait()


def test_a_file_without_step_statistics_is_read_whole_and_still_filtered(tmp_path):
    """A file written without statistics (another writer's, or a copy re-encoded by a tool)
    cannot be pruned by row group: every group is read and the window is still exact."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [(r, s, f"t{s}", "allreduce" if s % 2 else "backward", s + 0.1, s + 0.2, 0, None, None)
            for r in range(3) for s in range(10)]
    table = pa.Table.from_pylist([dict(zip(event_files.COLUMNS, row)) for row in rows], schema=event_files.arrow_schema())
    path = tmp_path / "bare.parquet"
    pq.write_table(table, path, row_group_size=7, write_statistics=False)
    opened = event_files.EventFile(path)
    assert opened.groups((4, 5)) == list(range(pq.ParquetFile(path).metadata.num_row_groups))
    assert opened.step_range() == (0, 9)
    window = opened.read(["rank", "step"], ["allreduce"], (4, 7))
    assert sorted(map(tuple, window.to_numpy().tolist())) == [(r, s) for r in range(3) for s in (5, 7)]
    pq.write_table(table, path, row_group_size=7)   # with statistics: only the groups of steps 4..7
    assert len(event_files.EventFile(path).groups((4, 5))) < pq.ParquetFile(path).metadata.num_row_groups


def test_an_event_line_longer_than_a_json_block_is_still_read(tmp_path, monkeypatch):
    """The JSON reader parses blocks in parallel and refuses a line longer than a block (a fused
    buffer of thousands of tensors); such a block of lines is parsed again as one block."""
    import io

    import pyarrow as pa
    import pyarrow.json as pj

    monkeypatch.setattr(event_sink, "_JSON_BLOCK", 1024)
    lines = [json.dumps({"type": "event", "schema": 1, "step": s, "tensor": "fused-0", "phase": "allreduce",
                         "t0": 1.0, "t1": 2.0, "bytes": 8,
                         "tensors": [f"layer{k}.weight" for k in range(200 if s == 3 else 2)]},
                        separators=(",", ":")).encode() + b"\n" for s in range(10)]
    with pytest.raises(pa.ArrowInvalid, match="straddling"):   # the reader's limit, the control
        pj.read_json(io.BytesIO(b"".join(lines)), read_options=pj.ReadOptions(block_size=1024))
    sink = event_sink.ColumnSink(tmp_path, 1, database="d")
    sink.add_lines(0, lines)
    sink.flush()
    frame = event_files.read(tmp_path / sink.commit(), ["step", "tensors"])
    assert frame["tensors"].tolist() == [",".join(json.loads(line)["tensors"]) for line in lines]


@pytest.mark.sweep
def test_a_lost_file_is_one_error_line_from_the_timeline_command(tmp_path, monkeypatch):
    """The command-line face of a lost file: one line, exit 2, no traceback (EventFileError is
    a QueryError, which every reading command reports)."""
    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=4, events_per_step=5)
    engine, run_id = _ingest(f"sqlite:///{tmp_path / 'l.db'}", run_dir)
    engine.dispose()
    shutil.rmtree(_file(engine, run_id))
    proc = scalestudy("timeline", str(run_id), "--db", f"sqlite:///{tmp_path / 'l.db'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "is missing" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.sweep
def test_an_events_folder_that_cannot_be_made_fails_the_ingestion_in_one_line_and_keeps_the_run(tmp_path):
    """$SCALESTUDY_EVENTS_DIR naming a file: scalestudy ingest says so in one line naming the
    variable and the folder; the run folder is untouched and ingests once the variable is mended."""
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=4, events_per_step=5)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    db = f"sqlite:///{tmp_path / 'b.db'}"
    before = sorted((p.name, p.stat().st_size) for p in (run_dir / "metrics").iterdir())
    proc = scalestudy("ingest", str(run_dir), "--db", db, cwd=tmp_path,
                      env={event_files.EVENTS_DIR_ENV: str(blocker / "events")})
    fail = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if line.lstrip().startswith("fail ")]
    assert len(fail) == 1 and "$SCALESTUDY_EVENTS_DIR" in fail[0] and str(blocker) in fail[0], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted((p.name, p.stat().st_size) for p in (run_dir / "metrics").iterdir()) == before
    again = scalestudy("ingest", str(run_dir), "--db", db, cwd=tmp_path, env={event_files.EVENTS_DIR_ENV: str(tmp_path / "ev")})
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(list((tmp_path / "ev").glob("*/run-*.parquet"))) == 1


def test_a_run_in_many_part_files_reads_as_the_table_does(tmp_path, monkeypatch):
    """Row groups of 40 events, a part file per 3 of them: every reader (windows across parts
    included) returns what the events table returns, and no part holds more than 3 groups."""
    import pyarrow.parquet as pq

    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    monkeypatch.setattr(event_files, "ROW_GROUP", 40)
    monkeypatch.setattr(event_files, "GROUPS_PER_PART", 3)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=3, steps=30, events_per_step=25)
    file_engine, file_id = _ingest(f"sqlite:///{tmp_path / 'f.db'}", run_dir)
    table_engine, table_id = _ingest(f"sqlite:///{tmp_path / 't.db'}", run_dir, table=True)
    parts = sorted(_file(file_engine, file_id).glob("part-*.parquet"))
    assert len(parts) > 10
    assert all(pq.ParquetFile(p).metadata.num_row_groups <= 3 for p in parts)
    _same(file_engine, file_id, table_engine, table_id)


def test_runs_named_by_earlier_versions_still_read_and_a_rerun_leaves_their_old_name_alone(tmp_path, monkeypatch):
    """Earlier versions named a run's events ``run-N.parquet``, with no database id: one file before
    part files, a folder of parts since. Both read as before, from the name the run recorded.
    Writing run N's events again (a re-run's ingestion) names them under the database's id and
    leaves the old name alone: under a shared folder it may be another database's run N."""
    import pyarrow.parquet as pq
    from sqlalchemy import update

    from results_db.store.schema import Run

    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=10, events_per_step=5)
    engine, run_id = _ingest(f"sqlite:///{tmp_path / 'o.db'}", run_dir)
    expected = query.events(engine, [run_id])
    keyed = _file(engine, run_id)
    assert keyed.parent.name == event_files.database_id(engine)
    folder = keyed.parent.parent
    whole = pq.read_table(keyed)
    shutil.copytree(keyed, folder / "parts")
    shutil.rmtree(keyed)
    old = folder / f"run-{run_id}.parquet"   # the name an earlier version gave it, recorded as it was
    with engine.begin() as conn:
        conn.execute(update(Run).where(Run.id == run_id).values(events_file=old.name))
    for layout in ("a folder of parts", "one file"):
        event_files.remove_path(old)
        if layout == "one file":
            pq.write_table(whole, old, row_group_size=17)
        else:
            shutil.copytree(folder / "parts", old)
        pd.testing.assert_frame_equal(query.events(engine, [run_id]), expected, obj=layout)
        pd.testing.assert_frame_equal(query.events(engine, [run_id], steps=(3, 4)),
                                      expected[expected["step"].between(3, 4)].reset_index(drop=True), obj=layout)
        assert event_files.run_files(engine, [run_id]) == {old.name: old}
    sink = event_sink.ColumnSink(folder, run_id, database=event_files.database_id(engine))   # written again
    sink.add_lines(1, (run_dir / "metrics" / "rank-1.jsonl").read_bytes().splitlines(keepends=True)[2:5])
    sink.flush()
    assert sink.commit() == f"{keyed.parent.name}/{keyed.name}"
    assert keyed.is_dir() and (keyed / event_files.part_name(0)).is_file()
    assert old.is_file()   # not this version's to remove
    assert len(event_files.read(keyed)) == 3


def test_event_lines_are_found_as_a_line_by_line_reading_finds_them():
    """``split_lines`` (numpy over a block) against bytes' own line splitting: blank lines,
    lines shorter than the prefix, the prefix alone, an event line in another form, and a last
    line without its newline (never diverted: it may be cut off)."""
    import random

    from results_db.ingest.rank_files import split_lines

    prefixes = RankFileReader.DIVERT_PREFIXES
    shapes = [prefixes[0] + b'"step":1,"phase":"x","t0":1,"t1":2}\n', b"\n", b"{}\n", prefixes[0] + b"\n",
              b'{"type": "event", "schema": 1}\n', b'{"type":"step","schema":1,"step":3}\n', b"x\n"]
    rng = random.Random(3)
    for trial in range(200):
        lines = [rng.choice(shapes) for _ in range(rng.randint(1, 30))]
        if trial % 3 == 0:
            lines[-1] = lines[-1].rstrip(b"\n")
        data = b"".join(lines)
        starts, ends, diverted = split_lines(data, prefixes)
        import io
        expected = io.BytesIO(data).readlines()
        assert [data[s:e] for s, e in zip(starts.tolist(), ends.tolist())] == expected
        assert diverted.tolist() == [raw.startswith(prefixes) and raw.endswith(b"\n") for raw in expected]


def test_the_fused_lists_key_is_renamed_as_bytes_replace_renames_it():
    """``rename_list_keys`` (numpy, from each ``[``) against bytes.replace: keys at the start and
    the end of a block, next to each other, a ``[`` before the key's length, the key in a string
    (escaped, so never the key), lists of counts; and untouched input comes back as it was."""
    import random

    from results_db.ingest.event_sink import _LIST_KEY, _LIST_KEY_PARSED, rename_list_keys

    pieces = [_LIST_KEY, b'"tensors":3', b'"tensor":"a[b"', b'"x":"\\"tensors\\":[1]"', b"[", b'["a","b"]',
              b'"tensorsX":[', b",", b"\n", b'{"type":"event"}']
    rng = random.Random(5)
    renamed = 0
    for _ in range(300):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        got = rename_list_keys(data)
        got = got if isinstance(got, bytes) else got.tobytes()
        assert got == data.replace(_LIST_KEY, _LIST_KEY_PARSED), data
        renamed += _LIST_KEY in data
    assert renamed > 50   # the trials did rename
    unchanged = b'{"step":1,"tensors":2}'
    assert rename_list_keys(unchanged) is unchanged


def test_a_bad_line_early_in_a_long_file_is_named_and_the_read_ahead_thread_ends(tmp_path, monkeypatch):
    """The reader reads blocks ahead in a thread: a bad event line in the first of many blocks
    is named by file and line, and the thread stops instead of reading the rest (or hanging)."""
    import threading

    from results_db.ingest import rank_files

    monkeypatch.setattr(rank_files, "BLOCK", 2048)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=1, steps=60, events_per_step=25)
    path = run_dir / "metrics" / "rank-0.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    bad = next(i for i, raw in enumerate(lines) if raw.startswith(RankFileReader.DIVERT_PREFIXES))
    lines[bad] = lines[bad].replace(b'"t0":', b'"t0_gone":')
    path.write_bytes(b"".join(lines))
    assert path.stat().st_size > 50 * 2048
    engine = connect(f"sqlite:///{tmp_path / 'b.db'}")
    [d] = register_runs(engine, "ev", [PlannedRun("k", {**RunSpec.load(run_dir / "spec.json").to_dict(),
                                                         "timeline": True}, str(run_dir))])
    with pytest.raises(IngestError, match=f"rank-0.jsonl:{bad + 1}: .*t0"):
        ingest_run(engine, d.run_id, run_dir)
    assert not [t for t in threading.enumerate() if t.name == "rank-file-reader"]
    assert not list((tmp_path / "b.db.events").rglob(".run-*"))   # nothing half-written is left


def test_an_emptied_events_folder_is_said_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(event_files.EVENTS_DIR_ENV, raising=False)
    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, ranks=2, steps=4, events_per_step=5)
    engine, run_id = _ingest(f"sqlite:///{tmp_path / 'e.db'}", run_dir)
    folder = _file(engine, run_id)
    for part in folder.iterdir():
        part.unlink()
    with pytest.raises(event_files.EventFileError, match="without its part files"):
        query.events(engine, [run_id])


# -- two databases on one events folder ---------------------------------------------------------

def _run_folder(folder, ranks: int, steps: int, timeline: bool = True):
    """A run folder as the workload writes it (``tests/synthetic_runs.py``), no MPI; without
    ``timeline`` its ranks wrote no event line (a run that recorded no timeline)."""
    make_metrics_dir(folder, ranks=ranks, steps=steps, events_per_step=5)
    if not timeline:
        for path in (folder / "metrics").glob("rank-*.jsonl"):
            path.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                                    if '"type":"event"' not in line))
    return folder


# The control of each test below: the same test with the names as they were before the database's id
# keyed them (``run-N.parquet``), which must fail it (strict: a pass there means the test cannot tell).
_NAMINGS = ["keyed", pytest.param("run-N", marks=pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="the control: run-N.parquet is the same name in both databases"))]


def _name_files(monkeypatch, naming: str) -> None:
    if naming == "run-N":
        monkeypatch.setattr(event_files, "file_name", lambda run_id, database: f"run-{int(run_id)}.parquet")


@pytest.mark.parametrize("naming", _NAMINGS)
@pytest.mark.sweep
def test_two_databases_sharing_an_events_folder_each_keep_their_own_run_1(tmp_path, monkeypatch, naming):
    """Two databases, one $SCALESTUDY_EVENTS_DIR, a timeline run with id 1 in each (2 ranks x 6 steps
    in a, 3 x 5 in b): each reads its own run's events afterwards, from a file of its own, and each
    lists (``run_files``: what a copy of those runs carries) exactly its runs' files. Today's names
    fail it: b's ingestion replaced a's ``run-1.parquet`` and a read b's events."""
    _name_files(monkeypatch, naming)
    shared = tmp_path / "shared"
    monkeypatch.setenv(event_files.EVENTS_DIR_ENV, str(shared))
    a, a_id = _ingest(f"sqlite:///{tmp_path / 'a.db'}", _run_folder(tmp_path / "run-a", ranks=2, steps=6))
    a_events = query.events(a, [a_id])
    assert len(a_events) == 2 * 6 * (4 + 5 + 1)
    b, b_id = _ingest(f"sqlite:///{tmp_path / 'b.db'}", _run_folder(tmp_path / "run-b", ranks=3, steps=5))
    assert a_id == b_id == 1
    assert event_files.database_id(a) != event_files.database_id(b)

    pd.testing.assert_frame_equal(query.events(a, [1]), a_events)
    b_events = query.events(b, [1])
    assert sorted(b_events["rank"].unique()) == [0, 1, 2] and len(b_events) == 3 * 5 * (4 + 5 + 1)
    assert query.timeline_sizes(a, [1]) == {1: len(a_events)} and query.timeline_sizes(b, [1]) == {1: len(b_events)}
    a_files, b_files = event_files.run_files(a, [1]), event_files.run_files(b, [1])
    assert len(a_files) == len(b_files) == 1
    assert set(a_files.values()).isdisjoint(b_files.values()), (a_files, b_files)

    # a second run in a, and one without a timeline: a set of runs lists exactly its runs' files
    a2, a2_id = _ingest(f"sqlite:///{tmp_path / 'a.db'}", _run_folder(tmp_path / "run-a2", ranks=2, steps=3), key="k2")
    a3, a3_id = _ingest(f"sqlite:///{tmp_path / 'a.db'}", _run_folder(tmp_path / "run-a3", ranks=2, steps=3,
                                                                        timeline=False), key="k3")
    assert (a2_id, a3_id) == (2, 3)
    both = event_files.run_files(a, [1, 2, 3])
    assert list(both) == [*a_files, *event_files.run_files(a, [2])] and event_files.run_files(a, [3]) == {}
    assert all(path.is_dir() and path.parent.parent == shared for path in both.values())
    for name, path in both.items():   # each listed file holds its run's events, under the name recorded
        assert path == shared / name
    assert len(event_files.read(both[next(iter(a_files))])) == len(a_events)
    assert not set(both.values()) & set(b_files.values())


class _Killed(Exception):
    """The ingestion's process killed before its transaction committed (the ``ingest`` failpoint)."""


@pytest.mark.parametrize("naming", _NAMINGS)
def test_a_rerun_without_a_timeline_removes_its_own_earlier_file_and_not_another_databases(
        tmp_path, monkeypatch, naming):
    """Database a's run 1 is ingested with its timeline and the process killed before the transaction
    committed (the reliability suite's ``ingest`` failpoint, here an exception): its event file is in
    place, the run still pending. Database b, on the same events folder, ingests its own run 1. Then
    a's run 1 runs again (a later sweep takes the pending run over: the same row) and records no
    timeline (it failed before its first step, say): a's earlier file is gone, b's stays and b reads
    its events. Today's names fail it: both were ``run-1.parquet``, and a's re-run removed b's."""
    _name_files(monkeypatch, naming)
    shared = tmp_path / "shared"
    monkeypatch.setenv(event_files.EVENTS_DIR_ENV, str(shared))
    a = connect(f"sqlite:///{tmp_path / 'a.db'}")
    first = _run_folder(tmp_path / "run-a", ranks=2, steps=6)
    spec = {**RunSpec.load(first / "spec.json").to_dict(), "timeline": True}
    [d] = register_runs(a, "ev", [PlannedRun("k", spec, str(first))])

    def killed(name):
        if name == "ingest":
            raise _Killed(name)

    with monkeypatch.context() as patch:
        patch.setattr(ingest, "failpoint", killed)
        with pytest.raises(_Killed):
            ingest_run(a, d.run_id, first)
    a_file = shared / event_files.file_name(d.run_id, event_files.database_id(a))
    assert a_file.is_dir()   # left in place, recorded nowhere
    assert query.runs(a, run_ids=[d.run_id], columns=["status", "events_file"]).values.tolist() == [["pending", None]]

    b, b_id = _ingest(f"sqlite:///{tmp_path / 'b.db'}", _run_folder(tmp_path / "run-b", ranks=3, steps=4))
    assert b_id == d.run_id == 1
    b_events = query.events(b, [b_id])
    [b_file] = event_files.run_files(b, [b_id]).values()

    again = _run_folder(tmp_path / "run-a-again", ranks=2, steps=2, timeline=False)
    [d2] = register_runs(a, "ev", [PlannedRun("k", spec, str(again))])
    assert d2.run_id == d.run_id and d2.taken_over_from == str(first)   # the same row, run again
    assert ingest_run(a, d2.run_id, again)
    assert query.runs(a, run_ids=[1], columns=["status", "events_file"]).values.tolist() == [["done", None]]
    assert not a_file.exists(), "a's earlier file was left behind"
    assert b_file.is_dir(), "a's re-run removed b's file"
    pd.testing.assert_frame_equal(query.events(b, [b_id]), b_events)
    assert len(query.events(a, [1])) == 0


def test_a_database_id_is_made_once_kept_and_must_be_a_folder_name(tmp_path):
    """Migration 0018 makes the id; a database whose row is gone makes one on first use and keeps
    it; an id that would name a path outside the events folder is refused in one line."""
    from sqlalchemy import text

    engine = connect(f"sqlite:///{tmp_path / 'i.db'}")
    made = event_files.database_id(engine)
    assert len(made) == 32 and event_files.database_id(engine) == made
    assert event_files.database_id(connect(f"sqlite:///{tmp_path / 'j.db'}")) != made
    with engine.begin() as conn:
        conn.execute(text("delete from settings"))
    again = event_files.database_id(engine)
    assert again != made and event_files.database_id(engine) == again
    with engine.begin() as conn:
        conn.execute(text("update settings set value = '../elsewhere' where name = 'database_id'"))
    with pytest.raises(event_files.EventFileError, match="is not a folder name"):
        event_files.database_id(engine)


def test_a_killed_ranks_stream_keeps_what_it_wrote_and_a_bad_one_is_named(tmp_path):
    """Issue 63: a rank killed mid-run (``os._exit``, no close) leaves a stream whose handed-over
    batches read back and whose buffer is lost; cut mid-batch it ingests every whole batch and
    the run says which file was cut; a file that is not an event stream, or has other columns, is
    refused in one line naming it, with nothing stored."""
    import subprocess

    from workloads.event_log import read_events

    run_dir = tmp_path / "run"
    make_metrics_dir(run_dir, 1, 2, 3)   # the step records and a JSON timeline we replace with a stream
    lines = (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines()
    (run_dir / "metrics" / "rank-0.jsonl").write_text("\n".join(l for l in lines if '"type":"event"' not in l) + "\n")
    program = ("import os, sys, time; from workloads.event_log import EventLog; log = EventLog(sys.argv[1], 0, batch=10)\n"
               "for k in range(25): log.add(step=k // 13, tensor=f't{k}', phase='grad_ready', t0=1.0 + k, t1=1.0 + k)\n"
               "deadline = time.monotonic() + 120\n"   # the writer's two batches on disk: an event, with a ceiling
               "while log.written < 20 and time.monotonic() < deadline: time.sleep(0.01)\n"
               "os._exit(9 if log.written >= 20 else 3)")
    killed = subprocess.run([sys.executable, "-c", program, str(run_dir)], cwd=REPO, timeout=300)
    assert killed.returncode == 9
    assert [e["tensor"] for e in read_events(run_dir, 0)] == [f"t{k}" for k in range(20)]   # 2 batches; 5 lost
    engine, run_id = _ingest(f"sqlite:///{tmp_path / 'k.db'}", run_dir)
    assert len(query.events(engine, [run_id])) == 20 and query.runs(engine, run_ids=[run_id])["status"][0] == "done"

    stream = run_dir / "metrics" / "events-rank-0.arrows"
    data = stream.read_bytes()
    stream.write_bytes(data[:-40])   # the second batch cut short
    engine, run_id = _ingest(f"sqlite:///{tmp_path / 'cut.db'}", run_dir, key="cut")
    [row] = query.runs(engine, run_ids=[run_id], columns=["status", "error"]).to_dict("records")
    assert len(query.events(engine, [run_id])) == 10
    assert row["status"] == "partial" and "events-rank-0.arrows" in row["error"], row

    for name, content, said in (("garbage", b"not an arrow stream at all" * 10, "not an Arrow IPC stream"),
                                ("columns", None, "its columns are not the timeline's")):
        if content is None:
            import pyarrow as pa

            with pa.OSFile(str(stream), "wb") as fh, pa.ipc.new_stream(fh, pa.schema([("step", pa.int64())])) as w:
                w.write_batch(pa.record_batch([pa.array([1, 2])], names=["step"]))
        else:
            stream.write_bytes(content)
        with pytest.raises(IngestError) as refused:
            _ingest(f"sqlite:///{tmp_path / f'{name}.db'}", run_dir, key=name)
        message = str(refused.value)
        assert str(stream) in message and said in message and "\n" not in message, message


def test_a_run_from_the_ranks_streams_ingests_as_its_json_lines_did(tmp_path):
    """Issue 63: the same run written both ways (``make_metrics_dir``: a JSON line an event, as
    ranks wrote before; ``make_metrics_streams``: each rank's binary stream, as they write now,
    the very same floats) gives the same events, per-step measures and two-step window, read back
    through the event files as through the events table."""
    from synthetic_runs import make_metrics_streams

    make_metrics_dir(tmp_path / "lines", 3, 12, 45)
    make_metrics_streams(tmp_path / "streams", 3, 12, 45, batch=200)   # several batches a rank
    lines_engine, lines_id = _ingest(f"sqlite:///{tmp_path / 'l.db'}", tmp_path / "lines")
    stream_engine, stream_id = _ingest(f"sqlite:///{tmp_path / 's.db'}", tmp_path / "streams")
    table_engine, table_id = _ingest(f"sqlite:///{tmp_path / 't.db'}", tmp_path / "streams", table=True)
    _same(stream_engine, stream_id, lines_engine, lines_id)
    _same(stream_engine, stream_id, table_engine, table_id)
    assert len(query.events(stream_engine, [stream_id])) == 3 * 12 * (4 + 45 + 3)


def test_written_all_waits_for_every_event_and_returns_after_close(tmp_path):
    """``written_all`` is what the rank's timeline cost waits on: after it, the writer thread has
    written every event handed over (its CPU count is whole); called after ``close`` it returns at
    once (the thread gone: a join on its queue would wait forever). Run in a thread with a ceiling."""
    import threading

    from workloads.event_log import EventLog, read_events

    (tmp_path / "metrics").mkdir()
    log = EventLog(tmp_path, 0, batch=7)
    for k in range(30):
        log.add(step=k, tensor=f"t{k}", phase="grad_ready", t0=1.0, t1=2.0)
    log.written_all()
    assert log.written == 30 and log.writer_cpu_seconds > 0
    log.close()
    done = threading.Event()
    threading.Thread(target=lambda: (log.written_all(), done.set()), daemon=True).start()
    assert done.wait(timeout=60), "written_all after close did not return"
    assert len(read_events(tmp_path, 0)) == 30
