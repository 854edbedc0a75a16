"""Issue 54, items 1 and 2: a study of one's own sweeps only what it sweeps (the preset gives
settings, not a grid, unless it is named), and a dry run leads with a summary that fits one
screen, its batch scripts written to files unless ``--show-scripts``."""

from __future__ import annotations

import re

import pytest

from conftest import REPO, scalestudy

POLARIS_TUTORIAL = ["site=polaris", "account=MyProject", "study_name=polaris_first", "nodes=1,2", "--dry-run"]


def _summary(stdout: str) -> list[str]:
    """The dry run's lines before its first run (``#0 ...``) or skipped run."""
    lines = stdout.splitlines()
    end = next(i for i, line in enumerate(lines) if re.match(r"#\d+ |skip #", line))
    return lines[:end]


def _launched(stdout: str) -> int:
    return int(re.search(r"(\d+) would launch", stdout).group(1))


@pytest.mark.sweep
def test_a_study_of_ones_own_sweeps_only_what_it_sweeps(tmp_path):
    """study_name= without study=: the smoke preset's grid (workers_per_node=1,2) is not swept,
    its settings are; study=smoke takes the grid too and names its axes; the default sweep keeps
    its 4 runs."""
    own = scalestudy("sweep", "study_name=mine", "nodes=1,2", "--dry-run", cwd=tmp_path)
    assert own.returncode == 0, own.stderr[-2000:]
    assert _launched(own.stdout) == 2 and own.stdout.count("    launch: ") == 2
    assert "not swept: the preset's grid (workers_per_node=1,2)" in own.stdout
    assert "its settings apply where the command line sets none: epochs=10" in own.stdout
    named = scalestudy("sweep", "study=smoke", "study_name=mine", "nodes=1,2", "--dry-run", cwd=tmp_path)
    assert named.returncode == 0, named.stderr[-2000:]
    assert _launched(named.stdout) == 4
    assert "swept by the smoke preset (not by this command line): workers_per_node=1,2" in named.stdout
    assert "nodes=1,2 workers" not in named.stdout   # nodes came from the command line, not the preset
    default = scalestudy("sweep", "--dry-run", cwd=tmp_path)
    assert default.returncode == 0 and _launched(default.stdout) == 4
    assert "swept by the smoke preset (not by this command line): nodes=1,2 workers_per_node=1,2" in default.stdout
    # a setting the command line gives is not the preset's
    given = scalestudy("sweep", "study_name=mine", "epochs=2", "--dry-run", cwd=tmp_path)
    assert "epochs=10" not in given.stdout and "the command line sets every setting it has" in given.stdout


@pytest.mark.sweep
def test_a_sweep_over_presets_takes_no_grid_from_the_default_preset(tmp_path):
    """study=a,b (artifact rerun's study=glob(run_*)): Hydra builds the grid from the primary config,
    which holds the default smoke preset; its nodes=1,2 x workers_per_node=1,2 belong to no job.
    Two one-run presets make two runs, not eight."""
    conf = tmp_path / "conf" / "study"
    conf.mkdir(parents=True)
    for name, nodes in (("mine_one", 1), ("mine_two", 2)):
        (conf / f"{name}.yaml").write_text(f"# @package _global_\nnodes: {nodes}\nworkers_per_node: 1\n"
                                           "threads_per_node: 1\nepochs: 1\n")
    proc = scalestudy("sweep", "--config-dir", str(tmp_path / "conf"), "study=mine_one,mine_two", "study_name=both",
                      "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _launched(proc.stdout) == 2, proc.stdout
    assert "a sweep over presets (study=mine_one,mine_two): each job takes its own preset's settings" in proc.stdout
    globbed = scalestudy("sweep", "--config-dir", str(tmp_path / "conf"), "study=glob(mine_*)", "study_name=both",
                         "--dry-run", cwd=tmp_path)
    assert globbed.returncode == 0 and _launched(globbed.stdout) == 2, globbed.stdout + globbed.stderr[-2000:]


@pytest.mark.sweep
def test_a_real_sweeps_first_line_names_the_axes_its_preset_swept(tmp_path):
    args = ["nodes=1", "workload.kind=command", "workload.command=[echo,hi]", f"hydra.sweep.dir={tmp_path / 'mr'}"]
    proc = scalestudy("sweep", "study=smoke", "study_name=p", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = proc.stderr.splitlines()[0]
    assert first.startswith("study p: 2 runs (workers_per_node swept by the smoke preset), 2 to launch"), first
    own = scalestudy("sweep", "study_name=q", *args, cwd=tmp_path)
    assert own.returncode == 0 and own.stderr.splitlines()[0].startswith("study q: 1 run, 1 to launch")


@pytest.mark.sweep
def test_the_tutorials_polaris_dry_run_plans_what_the_page_says(tmp_path):
    """Tutorial page 3 gives the count and the node-hours this dry run plans: 2 runs, not the 4
    the smoke preset's grid would have made of them (and their 18.00 node-hours at most)."""
    page = (REPO / "docs/tutorial/real-machine.md").read_text()
    assert "scalestudy sweep " + " ".join(POLARIS_TUTORIAL) in page
    said = " ".join(page.split())
    assert "Its summary plans 2 runs" in said and "3.00 node-hours if each job's runs fit" in said \
        and "9.00 at most" in said
    proc = scalestudy("sweep", *POLARIS_TUTORIAL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = "\n".join(_summary(proc.stdout))
    assert _launched(proc.stdout) == 2
    assert "3.00 if each batch job's runs fit its walltime, 9.00 at most" in summary


@pytest.mark.sweep
def test_the_dry_run_leads_with_a_summary_that_fits_a_screen(tmp_path):
    proc = scalestudy("sweep", *POLARIS_TUTORIAL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = _summary(proc.stdout)
    assert len(summary) <= 24, summary
    labels = {line.split()[0] for line in summary[1:] if line.startswith("  ") and not line.startswith("   ")}
    assert {"runs", "node-hours", "queue", "batch", "preset", "warning", "scripts"} <= labels, labels
    text = "\n".join(summary)
    assert "debug (1, 2-node runs)" in text and "2 (one per node count), walltime 01:00:00 each, account MyProject" \
        in text
    assert "a real sweep would stop here" in text   # the mpich wheel, said in the summary, not before it
    assert "allocation=packed: 2.00 / 12.00" in text   # the other allocation mode, in one phrase
    # the batch scripts are files whose folder it names, not pages of output
    assert "#PBS" not in proc.stdout
    folder = tmp_path / re.search(r"the batch scripts are in (\S+)/", text).group(1)
    scripts = [p for p in folder.iterdir() if not p.name.endswith((".stdout", ".stderr"))]
    assert len(scripts) == 3 and all("#PBS -l select=" in p.read_text() for p in scripts)
    # each submit command names its script's file
    submits = re.findall(r"submitted with: (.+)", proc.stdout)
    assert len(submits) == 3 and all((tmp_path / s.split()[-1]).exists() or
                                     (folder / s.split()[-1].rsplit("/", 1)[-1]).exists() for s in submits)
    shown = scalestudy("sweep", *POLARIS_TUTORIAL, "--show-scripts", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.count("#PBS -l select=") == 3
    # a later dry run of the study rewrites the folder: the scripts of the last one only
    assert len([p for p in folder.iterdir() if not p.name.endswith((".stdout", ".stderr"))]) == 3


def test_show_scripts_goes_with_a_dry_run(tmp_path):
    proc = scalestudy("sweep", "--show-scripts", "study_name=x", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "--show-scripts prints a dry run's batch scripts: give it with --dry-run" in proc.stderr
    assert not (tmp_path / "scalestudy.db").exists()


def test_overrides_after_a_flag_reach_hydra(tmp_path):
    """``study_name=x --config-dir DIR --dry-run``: Hydra's parser takes its overrides in one run."""
    from orchestrator.cli.sweep_cmd import flags_first

    assert flags_first(["a=1", "--config-dir", "d", "b=2", "-m", "--cfg", "job"]) == \
        ["--config-dir", "d", "-m", "--cfg", "job", "a=1", "b=2"]
    proc = scalestudy("sweep", "study_name=x", "--config-dir", str(REPO / "examples/ddp_gloo/conf"), "--dry-run",
                      cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 run of study x" in proc.stdout


def test_a_count_says_its_noun_in_the_singular_for_one():
    """Issue 62: "1 runs". ``counted`` is what every message uses (grep finds the old form gone)."""
    import re
    from pathlib import Path

    from workloads.plural import counted

    assert (counted(1, "run"), counted(0, "run"), counted(2, "run")) == ("1 run", "0 runs", "2 runs")
    root = Path(__file__).resolve().parents[2]
    for folder in ("orchestrator", "results_db"):
        for path in (root / folder).rglob("*.py"):
            # a message counting runs with a bare f-string number: the form that printed "1 runs"
            assert not re.search(r'\{len\(\w+\)\} runs\b', path.read_text()), path
