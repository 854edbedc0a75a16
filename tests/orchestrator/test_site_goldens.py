"""The batch jobs the real sites generate, compared line by line with reviewed copies.

For Theta, Polaris and Perlmutter a 1-, 2- and 128-node job is rendered (the batch script the
site's real provider writes, its submit command, the launch line of one run, the node-hours
charged) and compared with ``tests/orchestrator/golden/<site>-<N>n.txt``, so any change to what a real site
would submit shows as a diff in review. After a deliberate change:
``SCALESTUDY_UPDATE_GOLDEN=1 pytest tests/orchestrator/test_site_goldens.py`` and review the diff.

The launch lines are also checked against each machine's binding arithmetic, independently
of the code that makes them: ranks per node x CPUs per rank must fit a node's hardware threads.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

import pytest

from orchestrator.site.launchers import launch_flags
from orchestrator.pools.preview import node_hours, preview_batch_script, preview_launch_prefix
from orchestrator.site.queues import plan_batch_jobs
from orchestrator.site.config import load_site

GOLDEN = Path(__file__).parent / "golden"
SITES = ("theta", "polaris", "perlmutter")


def _shape(site, nodes: int) -> tuple[int, int]:
    """workers per node and threads per node of the run rendered for each job size: one rank on
    every core, four ranks on every core, two ranks on every hardware thread."""
    return {1: (1, site.cores_per_node), 2: (4, site.cores_per_node),
            128: (2, site.cores_per_node * site.threads_per_core)}[nodes]


GPU_SITES = ("polaris", "perlmutter_gpu")


def render(site_name: str, nodes: int, device: str = "cpu") -> str:
    """The batch job and one run's launch line; a GPU run has one rank per GPU, one thread each."""
    site = load_site(site_name)
    workers, threads = _shape(site, nodes) if device == "cpu" else (site.accelerators_per_node,
                                                                  site.accelerators_per_node)
    [job] = plan_batch_jobs(site, [nodes])
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        script, submit = preview_batch_script(site, job, Path(tmp))
        text = f"# submit: {submit}\n{script.rstrip()}\n"
    text = re.sub(r"/tmp/tmp[A-Za-z0-9_]+/", "<script_dir>/", text)
    options = " ".join(x for x in (site.launcher_options, launch_flags(site, threads // workers, workers, device))
                       if x)
    prefix = preview_launch_prefix(site, nodes, workers, options)
    charged, hours = node_hours(site, job)
    text += (f"# run: nodes={nodes} workers_per_node={workers} threads_per_node={threads} device={device}\n"
             f"# launch: {prefix} <program>\n"
             f"# queue: {job.queue}; charged at most {charged} nodes x {site.walltime} "
             f"= {hours:.2f} node-hours\n")
    text = re.sub(r"(block-0)\.\d+\.\d+", r"\1.<time>", text)
    return text.replace(str(Path(sys.executable).parent), "<env>/bin")


@pytest.mark.parametrize("site_name, device", [*((s, "cpu") for s in SITES), *((s, "cuda") for s in GPU_SITES)])
@pytest.mark.parametrize("nodes", [1, 2, 128])
def test_batch_job_matches_golden(site_name, nodes, device):
    got = render(site_name, nodes, device)
    path = GOLDEN / f"{site_name}{'-gpu' if device == 'cuda' and site_name in SITES else ''}-{nodes}n.txt"
    if os.environ.get("SCALESTUDY_UPDATE_GOLDEN"):
        path.write_text(got)
    assert path.is_file(), f"no golden {path}: SCALESTUDY_UPDATE_GOLDEN=1 writes it (review it)"
    want = path.read_text()
    for i, (a, b) in enumerate(zip(got.splitlines(), want.splitlines()), 1):
        assert a == b, f"{path.name} line {i}:\n  got:    {a}\n  golden: {b}"
    assert len(got.splitlines()) == len(want.splitlines()), f"{path.name}: line count differs"


def _flag(words: list[str], *names: str) -> int:
    for i, w in enumerate(words):
        for name in names:
            if w == name:
                return int(words[i + 1])
            if name.startswith("--") and w.startswith(name + "="):
                return int(w.split("=", 1)[1])
    raise AssertionError(f"none of {names} in {' '.join(words)}")


@pytest.mark.parametrize("site_name", SITES)
@pytest.mark.parametrize("nodes", [1, 2, 128])
def test_binding_fits_a_node(site_name, nodes):
    site = load_site(site_name)
    workers, threads = _shape(site, nodes)
    words = launch_flags(site, threads // workers, workers).split() + site.launcher_options.split()
    hw = site.cores_per_node * site.threads_per_core
    if site.mpi_launcher == "aprun":      # Theta: -d CPUs per rank in -j mode; N x d <= cores x j
        d, j = _flag(words, "-d"), _flag(words, "-j")
        assert j in (1, 2, 4) and j <= site.threads_per_core
        assert workers * d <= site.cores_per_node * j and d == threads // workers
    elif site.mpi_launcher == "srun":     # Perlmutter: -c logical CPUs per task, whole cores
        c = _flag(words, "--cpus-per-task", "-c")
        assert c % site.threads_per_core == 0 and workers * c <= hw
        assert c >= threads // workers
    else:                                 # Polaris: --depth hardware threads per rank
        depth = _flag(words, "--depth")
        assert workers * depth <= hw and depth == threads // workers


@pytest.mark.parametrize("site_name", GPU_SITES)
def test_gpu_binding_gives_each_rank_its_gpus_numa_share(site_name):
    """A GPU run's ranks own equal shares of the node's cores, whatever threads they run: the
    facilities' GPU examples (ALCF: --depth=8 for 4 ranks; NERSC: -c floor(64/4) x 2 = 32)."""
    site = load_site(site_name)
    words = launch_flags(site, 1, 4, "cuda").split()
    if site.mpi_launcher == "srun":
        assert _flag(words, "--cpus-per-task") == 32 and "--gpus-per-node=4" in words and "--gpu-bind=none" in words
        assert not any(w.startswith("--gpus-per-task") for w in words)
    else:
        assert _flag(words, "--depth") == 8 and not any("gpu" in w for w in words)
