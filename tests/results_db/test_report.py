"""`scalestudy report`: the page's tables against hand computations, partial grids said
in words, escaping, the masked password, the notes on oversubscribed figures, bad input."""

from __future__ import annotations

import re
import statistics

import pandas as pd
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from orchestrator.cli import main
from results_db import connect
from results_db.report.figures import data as fd
from results_db.report.figures import render_study
from results_db.report.html_report import ReportError, build_report
from results_db.store.runs import PlannedRun, mark_failed, register_runs
from results_db.store.schema import Eval, Run
from workloads.spec import RunSpec

from conftest import scalestudy

PASSWORD = "s3cret-Pw"
SHOWN_URL = f"postgresql+psycopg://analyst:{PASSWORD}@db.example/results"


def add_runs(engine, study: str, rows: list[dict]) -> list[int]:
    """Register runs through the real API, then give each its state and measurements.

    A row: spec fields, plus ``status``, ``throughput``, ``final_top1``, ``evals`` [(epoch, wall, top1)],
    ``error``, ``cpus`` (the recorded host cores)."""
    plans = []
    for i, row in enumerate(rows):
        spec = RunSpec(study=study, **{k: v for k, v in row.items() if k in RunSpec.__dataclass_fields__})
        prov = {"git_commit": "c0ffee" * 6 + "abcd", "git_dirty": True,
                "environment": {"scalestudy": "0.1.0", "torch": "2.13.0", "login_host": "login1",
                                **({"cpus": row["cpus"]} if "cpus" in row else {})}}
        plans.append(PlannedRun(f"{study}-{i}", spec.to_dict(), f"/runs/{study}/{i}", prov))
    ids = [d.run_id for d in register_runs(engine, study, plans)]
    with Session(engine) as s, s.begin():
        for run_id, row in zip(ids, rows):
            if row.get("status", "done") == "done":
                s.execute(update(Run).where(Run.id == run_id).values(
                    status="done", throughput=row.get("throughput"), final_top1=row.get("final_top1"),
                    hosts="n1", job_id=row.get("job_id"),
                    versions={"torch": "2.13.0", "mpi4py": "4.1.1", "mpi_library": "MPICH Version: 5.0.0"}))
                for epoch, wall, top1 in row.get("evals", []):
                    s.add(Eval(run_id=run_id, epoch=epoch, wall=wall, top1=top1, loss=1.0, samples_seen=10))
    for run_id, row in zip(ids, rows):
        if row.get("status", "done") != "done":
            mark_failed(engine, run_id, row.get("error", ""), status=row["status"])
    return ids


# (algorithm, nodes, seed) -> (samples/s, final top-1, evals)
MEASURED = {
    ("sync", 1, 0): (100.0, 0.50, [(0, 10.0, 0.40), (1, 20.0, 0.50)]),
    ("sync", 1, 1): (110.0, 0.54, [(0, 11.0, 0.45), (1, 22.0, 0.54)]),
    ("sync", 2, 0): (180.0, 0.52, [(0, 6.0, 0.42), (1, 12.0, 0.52)]),
    ("sync", 2, 1): (200.0, 0.56, [(0, 7.0, 0.38), (1, 14.0, 0.56)]),
    ("eager_solo", 1, 0): (150.0, 0.48, [(0, 8.0, 0.41), (1, 16.0, 0.48)]),
    ("eager_solo", 1, 1): (154.0, 0.46, [(0, 9.0, 0.36), (1, 18.0, 0.46)]),
}


@pytest.fixture
def engine(db_url):
    engine = connect(db_url)
    rows = [{"site": "local_slurm", "nodes": n, "workers_per_node": 1, "threads_per_node": 1, "algorithm": a,
             "seed": seed, "throughput": thr, "final_top1": top1, "evals": evals, "job_id": f"{1000 + len(a) + n}"}
            for (a, n, seed), (thr, top1, evals) in MEASURED.items()]
    rows.append({"site": "local_slurm", "nodes": 2, "workers_per_node": 1, "threads_per_node": 1,
                 "algorithm": "eager_solo", "status": "failed",
                 "error": "rank 1: RuntimeError: <script>alert('x')</script> ran out of luck"})
    rows.append({"site": "local_slurm", "nodes": 2, "workers_per_node": 1, "threads_per_node": 1,
                 "algorithm": "eager_solo", "seed": 1, "status": "timeout", "error": "stopped at run_timeout=60 s"})
    add_runs(engine, "rep", rows)
    yield engine
    engine.dispose()


@pytest.mark.sweep
def test_configuration_table_against_hand_computation(engine, tmp_path):
    report = build_report(engine, "rep", tmp_path / "r", SHOWN_URL, target=0.45)
    table = report.configurations.set_index("config")
    sync2 = table.loc["algorithm=sync, nodes=2"]
    assert sync2["throughput_mean"] == 190.0 and sync2["runs"] == 2
    assert sync2["throughput_std"] == pytest.approx(statistics.stdev([180.0, 200.0]))
    # default baseline: the smallest node count, per algorithm; efficiency = speedup x 1 rank / 2 ranks
    assert sync2["speedup"] == pytest.approx(190.0 / 105.0) and sync2["efficiency"] == pytest.approx(190.0 / 210.0)
    assert sync2["top1_mean"] == pytest.approx(0.54)
    # time to 45 %: seed 0 reaches it after epoch 1 (12 s), seed 1 after epoch 1 (14 s)
    assert sync2["tta_seconds_mean"] == pytest.approx(13.0) and sync2["tta_reached"] == 2
    assert table.loc["algorithm=sync, nodes=1", "tta_seconds_mean"] == pytest.approx((20.0 + 11.0) / 2)
    # the eager_solo 2-node cell has a failed and a timed-out run and no finished one: a row saying so
    hole = table.loc["algorithm=eager_solo, nodes=2"]
    assert hole["status"] == "no finished run: failed, timeout" and hole["runs"] == 0
    html = report.index.read_text()
    assert "190.0 ± 14.1" in html   # as a person reads them
    # two repeats a side are too few for a ratio's interval (results_db/stats/confidence.py): the
    # speedup is shown with its spread, 190/105 with std 14.1/105, and no interval is claimed
    assert "1.810 ± 0.135" in html and "[1.6" not in html
    assert "no finished run: failed, timeout" in html
    # every figure on the page exists beside it, with its CSV and PDF linked
    for src in re.findall(r'src="([^"]+)"', html):
        assert (report.index.parent / src).is_file()
    for link in re.findall(r'href="(figures/[^"]+)"', html):
        assert (report.index.parent / link).is_file()
    assert 'href="figures/throughput_by_algorithm.pdf"' in html and 'href="figures/throughput_by_algorithm.csv"' in html
    assert pd.read_csv(report.index.parent / "configurations.csv").shape[0] == 4


@pytest.mark.sweep
def test_failures_provenance_escaping_and_masked_password(engine, tmp_path):
    report = build_report(engine, "rep", tmp_path / "r", SHOWN_URL)
    html = report.index.read_text()
    assert set(report.failures["status"]) == {"failed", "timeout"}
    assert "stopped at run_timeout=60 s" in html
    # a run's text is text on the page, never markup
    assert "<script>" not in html and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    # the database is named, its password never (page, CSVs, figure manifest)
    assert "postgresql+psycopg://analyst:***@db.example/results" in html
    for path in (tmp_path / "r").rglob("*"):
        if path.is_file() and path.suffix in (".html", ".csv", ".json"):
            assert PASSWORD not in path.read_text(errors="replace"), path
    # libpq's other spelling: the password in the query string
    in_query = build_report(engine, "rep", tmp_path / "q", f"postgresql+psycopg://analyst@db.example/results"
                                                          f"?password={PASSWORD}&sslmode=require")
    for path in (tmp_path / "q").rglob("*"):
        if path.is_file() and path.suffix in (".html", ".csv", ".json"):
            assert PASSWORD not in path.read_text(errors="replace"), path
    assert "sslmode=require" in in_query.index.read_text()
    # provenance: commit and dirty flag, versions on both sides, MPI library, site, batch jobs
    for text in ("c0ffee" * 6 + "abcd", "dirty", "MPICH Version: 5.0.0", "local_slurm", "1005", "2.13.0",
                 "mpi4py", "login1"):
        assert text in html, text
    # self-contained: nothing is loaded from anywhere but the folder
    assert not re.search(r'(src|href)="(https?:)?//', html) and "<script" not in html and "@import" not in html


@pytest.mark.sweep
def test_baseline_is_the_users_choice_and_bad_choices_are_one_line(engine, tmp_path):
    report = build_report(engine, "rep", tmp_path / "r", SHOWN_URL, baseline="algorithm=sync")
    row = report.configurations.set_index("config").loc["algorithm=eager_solo, nodes=1"]
    assert row["speedup"] == pytest.approx(152.0 / 105.0) and row["efficiency"] == pytest.approx(152.0 / 105.0)
    assert "speedup vs algorithm=sync" in report.index.read_text()
    assert "speedup vs nodes=1" in build_report(engine, "rep", tmp_path / "r", SHOWN_URL).index.read_text()
    out = tmp_path / "never"
    for kwargs, words in [
        ({"baseline": "nodes=3"}, r"baseline nodes=3: no finished run of study 'rep' has nodes=3 \(finished runs "
                                  r"have nodes = 1, 2\)"),
        ({"baseline": "nodez=1"}, "baseline axis 'nodez' is not a sweep axis"),
        ({"target": 1.5}, "target 1.5: a top-1 accuracy between 0 and 1"),
    ]:
        with pytest.raises(ReportError, match=words):
            build_report(engine, "rep", out, SHOWN_URL, **kwargs)
    with pytest.raises(ReportError, match="study 'nope' has no runs in this database; studies here: rep"):
        build_report(engine, "nope", out, SHOWN_URL)
    assert not out.exists()
    (out / "mine").mkdir(parents=True)
    with pytest.raises(ReportError, match="holds files that are not a scalestudy report"):
        build_report(engine, "rep", out, SHOWN_URL)


@pytest.mark.sweep
def test_cli_report_errors_name_the_field_and_value(engine, tmp_path, capsys, monkeypatch):
    url = engine.url.render_as_string(hide_password=False)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--study", "rep", "--baseline", "algorithm=ddp", "--db", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("scalestudy: error: baseline algorithm=ddp: no finished run")
    assert main(["report", "--study", "rep", "--db", url]) == 0
    assert (tmp_path / "reports" / "rep" / "index.html").is_file()


GRID = [(1, 1, "done", 100.0), (1, 2, "failed", None), (2, 1, "failed", None), (2, 2, "done", 360.0)]


@pytest.mark.sweep
def test_a_partial_grid_is_said_not_compared_along_another_axis(tmp_path):
    engine = connect(f"sqlite:///{tmp_path / 'grid.db'}")
    add_runs(engine, "grid", [{"site": "local", "nodes": n, "workers_per_node": w, "threads_per_node": w,
                               "status": st, "throughput": thr, "error": "boom", "cpus": 16}
                              for n, w, st, thr in GRID])
    sr = fd.load_study(engine, "grid")
    # the finished runs alone would make workers per node look determined by nodes, and a line
    # against nodes would compare (1 node, 1 worker) with (2 nodes, 2 workers) under the name "nodes"
    assert fd.independent_axes(sr.runs, ["nodes", "workers_per_node"]) == ("nodes",)
    assert sr.varying == ("nodes", "workers_per_node")
    table = fd.throughput_vs(sr, "nodes")
    assert table.groupby("series").size().max() == 1          # no line joins configurations of different wpn
    out = tmp_path / "fig"
    results = {r.name: r for r in render_study(engine, "grid", out, formats=("svg",))}
    note = results["throughput_vs_nodes"].notes[0]
    assert note.startswith("Partial grid: 2 of 4 configurations have no finished run")
    assert "nodes=1, workers per node=2 (failed)" in note and "nodes=2, workers per node=1 (failed)" in note
    assert "Partial grid: 2 of 4 configurations" in (out / "throughput_vs_nodes.svg").read_text()
    report = build_report(engine, "grid", tmp_path / "r", f"sqlite:///{tmp_path / 'grid.db'}")
    states = report.configurations.set_index("config")["status"]
    assert states["nodes=1, workers per node=2"] == "no finished run: failed"
    html = report.index.read_text()
    assert "Partial grid: 2 of 4 configurations have no finished run" in html
    assert html.count('class="missing"') == 2


@pytest.mark.sweep
def test_figures_of_oversubscribed_local_runs_say_so(tmp_path):
    engine = connect(f"sqlite:///{tmp_path / 'over.db'}")
    add_runs(engine, "over", [{"site": "local", "nodes": n, "workers_per_node": 2, "threads_per_node": 2,
                               "throughput": 50.0 * n, "cpus": 2} for n in (1, 2)])
    results = {r.name: r for r in render_study(engine, "over", tmp_path / "fig", formats=("svg",))}
    [note] = results["throughput_vs_nodes"].notes
    assert note.startswith("1 of these 2 runs ran up to 2 threads per CPU on the most crowded host (up to 4 ranks): "
                           "the ranks shared cores")
    assert "shared cores" in (tmp_path / "fig" / "throughput_vs_nodes.svg").read_text()
    # the same runs on a host with enough cores carry no note
    engine2 = connect(f"sqlite:///{tmp_path / 'fine.db'}")
    add_runs(engine2, "fine", [{"site": "local", "nodes": n, "workers_per_node": 2, "threads_per_node": 2,
                                "throughput": 50.0 * n, "cpus": 8} for n in (1, 2)])
    assert all(not r.notes for r in render_study(engine2, "fine", tmp_path / "fig2", formats=("svg",)))


@pytest.mark.sweep
def test_crowding_is_decided_by_hosts_and_emulated_runs_are_labelled_everywhere(tmp_path):
    """Runs whose ranks shared a host's cores get the crowding note whatever their site is
    called (here a user's own copy of local_slurm), emulated ones too; and compute=emulated is
    on every table, CSV, figure and report page they appear in: each check below fails if its
    label is dropped."""
    from results_db.report.html_report import build_report

    url = f"sqlite:///{tmp_path / 'emu.db'}"
    engine = connect(url)
    ids = add_runs(engine, "emu", [{"site": "my_slurm_copy", "nodes": n, "workers_per_node": 2, "compute": "emulated",
                                    "compute_profile": "/p.json", "throughput": 40.0 * n} for n in (1, 2, 4)])
    with Session(engine) as s, s.begin():   # ingestion's host_load: 2 ranks / 2 CPUs, 4 / 2, 8 / 2
        for run_id, load in zip(ids, (1.0, 2.0, 4.0)):
            s.execute(update(Run).where(Run.id == run_id).values(host_load=load))
    results = {r.name: r for r in render_study(engine, "emu", tmp_path / "fig", formats=("svg",))}
    notes = " ".join(results["throughput_vs_nodes"].notes)
    assert "2 of these 3 runs ran up to 4 threads per CPU" in notes and "emulated (compute=emulated)" in notes
    assert "emulated (compute=emulated)" in (tmp_path / "fig" / "throughput_vs_nodes.svg").read_text()
    report = build_report(engine, "emu", tmp_path / "report", url)
    page = report.index.read_text()
    assert "<th>compute</th>" in page and page.count('data-col="compute">emulated</td>') == 3, \
        "the configuration rows lost the label"
    assert "emulated (compute=emulated)" in page and "threads per CPU" in page
    # said once on the page, above the table: not again in each figure's box (issue 39: 17 times)
    import re
    assert len(re.findall(r"2 of these 3 runs ran up to 4 threads per CPU", page)) == 1, page.count("threads per CPU")
    csv_text = (tmp_path / "report" / "configurations.csv").read_text()
    assert "compute" in csv_text.splitlines()[0] and csv_text.count("emulated") >= 3
    query_csv = scalestudy("query", "--study", "emu", "--db", url, "--format", "csv", cwd=tmp_path).stdout
    header = query_csv.splitlines()[0].split(",")
    assert "compute" in header and all(line.split(",")[header.index("compute")] == "emulated"
                                       for line in query_csv.splitlines()[1:])


def test_a_study_with_no_finished_run_still_reports_its_failures(tmp_path):
    engine = connect(f"sqlite:///{tmp_path / 'bad.db'}")
    add_runs(engine, "bad", [{"site": "local", "nodes": n, "status": "failed", "error": f"node {n} said no"}
                             for n in (1, 2)])
    report = build_report(engine, "bad", tmp_path / "r", f"sqlite:///{tmp_path / 'bad.db'}")
    html = report.index.read_text()
    assert "2 runs: 2 failed." in html and "No run of this study finished" in html
    assert "node 1 said no" in html and "node 2 said no" in html and not report.figures
    with pytest.raises(ReportError, match="baseline nodes=1: study 'bad' has no finished run"):
        build_report(engine, "bad", tmp_path / "r", "sqlite://", baseline="nodes=1")


@pytest.mark.sweep
def test_review_cases_no_evals_float_params_and_thread_baseline(tmp_path):
    """A target on a study without evaluations, a float parameter sweep with a failed run, a
    parameter set on some runs only, and efficiency against a threads-per-node baseline."""
    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    add_runs(engine, "p", [{"site": "local", "nodes": 1, "threads_per_node": t, "params": {"scale": s},
                            "status": st, "throughput": thr, "error": "boom"}
                           for t, s, st, thr in [(1, 1.0, "done", 100.0), (1, 1.5, "failed", None),
                                                 (1, 2.0, "done", 120.0), (2, 1.0, "done", 160.0),
                                                 (2, 1.5, "done", 170.0), (2, 2.0, "done", 180.0)]])
    # no run has evaluations: a target gives blanks, not a crash
    report = build_report(engine, "p", tmp_path / "out", "sqlite:///r.db", target=0.5,
                          baseline="threads_per_node=1")
    table = report.configurations.set_index("config")
    # the failed params.scale=1.5 cell is the one hole (3 x 2 cells, 5 finished), not 3 phantom ones
    holes = table[table["status"] != "done"]
    assert len(holes) == 1 and "1.5" in holes.index[0] and "threads" in holes.index[0]
    # per thread: 2 threads give 1.6x at scale 1.0, so efficiency 0.8 (not the speedup, 1.6)
    row = table.loc[[c for c in table.index if "scale=1.0" in c and "per node=2" in c][0]]
    assert row["speedup"] == pytest.approx(1.6) and row["efficiency"] == pytest.approx(0.8)
    # a run stopped half-way leaves a folder the next report may replace
    (tmp_path / "out" / "index.html").unlink()
    assert build_report(engine, "p", tmp_path / "out", "sqlite:///r.db").index.is_file()
    # evaluations from a user's script through the reporting module may not count samples
    from results_db.store import query
    first_run = int(query.runs(engine, study="p")["run_id"].min())   # a finished run (threads 1, scale 1.0)
    with Session(engine) as s, s.begin():
        s.add(Eval(run_id=first_run, epoch=0, wall=3.0, top1=0.9, loss=1.0, samples_seen=None))
    reached = query.time_to_accuracy(engine, [first_run], 0.5)
    assert reached["seconds"].tolist() == [3.0] and reached["samples"].isna().all()
    assert build_report(engine, "p", tmp_path / "out", "sqlite:///r.db", target=0.5).index.is_file()
    # a parameter present on some runs only: one "unset" value, not one per run
    from results_db.report.figures.grid import build_grid
    import pandas as pd
    planned = pd.DataFrame({"nodes": [1, 1, 2, 2, 1, 2], "params.x": [None, 5, None, 5, float("nan"), float("nan")],
                            "status": ["done"] * 6})
    grid = build_grid(planned, planned, ["nodes", "params.x"])
    assert (grid.cells, grid.finished) == (4, 4)


@pytest.mark.sweep
def test_runs_at_chance_are_flagged_and_no_default_target_is_set_below_chance(tmp_path):
    """Issue 39: the eager_sgd report read "seconds to top-1 ≥ 8 %" with 10 classes, and a
    diverged run passed without comment."""
    from results_db.report.figures.data import load_study
    from results_db.report.figures.derived import default_target
    from results_db.report.html_report import build_report

    url = f"sqlite:///{tmp_path / 'c.db'}"
    engine = connect(url)
    ids = add_runs(engine, "flat", [{"nodes": n, "throughput": 10.0 * n, "final_top1": top1,
                                     "evals": [(0, 1.0, top1)]} for n, top1 in ((1, 0.08), (2, 0.55))])
    with Session(engine) as s, s.begin():
        s.execute(update(Run).where(Run.id.in_(ids)).values(classes=10))
    page = build_report(engine, "flat", tmp_path / "rep", url).index.read_text()
    assert "1 of 2 runs ended at chance-level top-1 (1 / classes; runs 1)" in page
    assert default_target(engine, load_study(engine, "flat")) is None     # 8 % with 10 classes: below chance
    with Session(engine) as s, s.begin():   # the control: runs that did not record their classes
        s.execute(update(Run).where(Run.id.in_(ids)).values(classes=None))
    assert default_target(engine, load_study(engine, "flat")) == 0.08


@pytest.mark.sweep
def test_the_time_to_accuracy_target_is_named_with_its_rule(engine, tmp_path):
    """Issue 54: "seconds to top-1 ≥ 24 %" said nothing of how 24 % was chosen. The default rule
    (the best top-1 every run reached, rounded down to a whole percent) and a given target are
    named in the table's header and legend, the figure's caption and its CSV."""
    import json

    from results_db.report.figures.derived import TOP1_RULE

    report = build_report(engine, "rep", tmp_path / "auto", SHOWN_URL)
    page = " ".join(report.index.read_text().split())
    # the worst run's best is 0.46 (eager_solo, seed 1): every run reached 46 %
    assert "seconds to top-1 ≥ 46 % (every run&#39;s best, rounded down)" in page
    assert f"top-1 ≥ 46 %, the target being {TOP1_RULE} (scalestudy report --target sets another)" in page
    manifest = json.loads((tmp_path / "auto" / "figures" / "manifest.json").read_text())
    caption = next(f["caption"] for f in manifest["figures"] if f["name"] == "time_to_accuracy")
    assert f"The target, top-1 ≥ 46 %, is {TOP1_RULE}." in caption
    given = build_report(engine, "rep", tmp_path / "given", SHOWN_URL, target=0.455)
    page = " ".join(given.index.read_text().split())
    assert "seconds to top-1 ≥ 45.5 % (as given (--target))" in page and "the target being as given" in page
    results = render_study(engine, "rep", tmp_path / "fig", only=["time_to_accuracy"], target=0.455)
    assert "is as given (--target)" in results[0].caption
    assert set(pd.read_csv(tmp_path / "fig" / "time_to_accuracy.csv")["target_rule"]) == {"as given (--target)"}
