"""The report of a real small sweep, opened in a real headless Chromium: it loads with no
console error and no broken image, asks for nothing outside its folder, is not blank, and
the numbers a person reads in its tables are those an independent SQL query gives."""

from __future__ import annotations

import io
import json
import sqlite3
from contextlib import closing

import pytest
from PIL import Image, ImageStat

from conftest import scalestudy
from headless_browser import Chromium, file_url, find_chromium

CHROMIUM = find_chromium()
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH: apt-get install chromium (.ci/run installs it)")]

FLAKY = '''
from workloads.models import build_model


def make(input_shape, num_classes, params, seed):
    """The built-in CNN; with params.crash, a run that fails at start-up (its reason shows in the report)."""
    if params.get("crash"):
        raise RuntimeError("deliberate <failure> & stop for the report test")
    return build_model("small_cnn", input_shape, num_classes, seed)
'''

ROWS_JS = """[...document.querySelectorAll('#configurations tr[data-config]')].map(tr => ({
  config: tr.dataset.config, missing: tr.classList.contains('missing'),
  cells: Object.fromEntries([...tr.querySelectorAll('td')].map(td => [td.dataset.col, td.textContent.trim()]))}))"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    (root / "pkg").mkdir()
    (root / "pkg" / "flaky.py").write_text(FLAKY)
    sweep = scalestudy("sweep", "study=smoke", "study_name=browser", "nodes=1", "workers_per_node=1,2", "epochs=2",
                       "steps_per_epoch=8", "timeline=true", "model=flaky:make", "+params.crash=false,true",
                       f"hydra.sweep.dir={root / 'mr'}", cwd=root, env={"PYTHONPATH": str(root / "pkg")}, timeout=400)
    assert sweep.returncode == 1 and "2 of 4 runs failed" in sweep.stderr, sweep.stderr[-3000:]
    made = scalestudy("report", "--study", "browser", "--out", str(root / "report"), cwd=root)
    assert made.returncode == 0, made.stderr
    return root


def test_the_page_loads_whole_in_a_real_browser(report):
    index = report / "report" / "index.html"
    with Chromium(CHROMIUM) as browser:
        visit = browser.visit(file_url(index))
        images = browser.evaluate("[...document.images].map(i => ({src: i.getAttribute('src'), "
                                  "ok: i.complete && i.naturalWidth > 0, width: i.naturalWidth}))")
        rows = browser.evaluate(ROWS_JS)
        failures = browser.evaluate("[...document.querySelectorAll('#failures-table tr')].slice(1)"
                                    ".map(tr => tr.textContent)")
        provenance = browser.evaluate("document.querySelector('#provenance').textContent")
    (report / "screenshot.png").write_bytes(visit.screenshot)
    assert visit.console_errors == [] and visit.failed_loads == []
    # no network: every request is a file inside the report's folder
    folder = file_url(index.parent)
    assert visit.requested and all(url.startswith(folder + "/") for url in visit.requested), visit.requested
    # every figure drawn is on the page, and every image loaded
    drawn = {p.stem for p in (report / "report" / "figures").glob("*.png")}
    assert len(drawn) >= 8 and {"timeline", "throughput_vs_workers_per_node", "accuracy_vs_epoch"} <= drawn
    assert sorted(i["src"] for i in images) == sorted(f"figures/{name}.png" for name in drawn)
    assert all(i["ok"] and i["width"] > 400 for i in images), images
    # the screenshot shows a page, not a blank
    with Image.open(io.BytesIO(visit.screenshot)) as shot:
        gray = shot.convert("L")
        assert shot.width >= 1000 and shot.height > 2000
        assert ImageStat.Stat(gray).stddev[0] > 20 and len(gray.getcolors(1 << 16) or []) > 50
    # the failed runs, with their reasons, as text
    assert len(failures) == 2 and all("deliberate <failure> & stop for the report test" in f for f in failures)
    with closing(sqlite3.connect(report / "scalestudy.db")) as db:
        commit, = db.execute("SELECT DISTINCT git_commit FROM runs").fetchone()
        sql = {w: (n, thr, top1) for w, n, thr, top1 in db.execute(
            "SELECT workers_per_node, COUNT(*), AVG(throughput), AVG(final_top1) FROM runs "
            "WHERE status = 'done' AND latest GROUP BY workers_per_node")}
    assert commit and commit in provenance and "MPICH" in provenance
    # the table against the independent query of the database above
    shown = {int(r["cells"]["workers_per_node"]): r["cells"] for r in rows if not r["missing"]}
    assert set(shown) == set(sql) == {1, 2}
    for w, (n, thr, top1) in sql.items():
        assert shown[w]["runs"] == str(n) and shown[w]["throughput"] == f"{thr:.1f}"
        assert shown[w]["final_top1"] == f"{top1 * 100:.1f} %"
    speedup = sql[2][1] / sql[1][1]     # the default baseline: one worker per node
    assert shown[2]["speedup"] == f"{speedup:.3f}" and shown[2]["efficiency"] == f"{speedup / 2:.3f}"
    assert shown[1]["speedup"] == "1.000"
    # the configurations that never finished are rows that say why
    missing = [r for r in rows if r["missing"]]
    assert len(missing) == 2 and all(r["cells"]["state"] == "no finished run: failed" for r in missing)
    manifest = json.loads((report / "report" / "figures" / "manifest.json").read_text())
    assert manifest["source"].startswith("sqlite:///")
