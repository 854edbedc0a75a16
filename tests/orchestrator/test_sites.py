"""Sites load from YAML and are validated in full; values bound for shells are held to strict forms."""

from __future__ import annotations

import re

import pytest

from orchestrator.errors import ConfigError
from orchestrator.site.config import known_sites, load_site, with_overrides

BASE = "provider: slurm\nmpi_launcher: srun\ncores_per_node: 2\nmax_nodes: 2\n"


def test_every_shipped_site_loads():
    assert set(known_sites()) >= {"local", "local_slurm", "theta", "polaris", "perlmutter"}
    assert "template" not in known_sites()
    theta = load_site("theta")
    assert (theta.provider, theta.mpi_launcher, theta.cores_per_node, theta.threads_per_core) == ("cobalt", "aprun", 64, 4)
    assert load_site("polaris").provider == "pbspro" and load_site("perlmutter").mpi_launcher == "srun"
    assert load_site("local_slurm").launcher_options == "--mpi=pmi2"


def test_the_template_is_a_valid_site(tmp_path):
    from orchestrator.site.config import site_dir as _site_dir

    path = tmp_path / "mysite.yaml"
    path.write_text((_site_dir() / "template.yaml").read_text())
    site = load_site(str(path))
    assert site.name == "mysite" and site.worker_init


@pytest.mark.parametrize("text, words", [
    (BASE + "queue_nme: x\n", "site.queue_nme"),
    ("provider: local\nmpi_launcher: mpiexec\ncores_per_node: 2\n", "site.max_nodes=None: required"),
    (BASE.replace("slurm", "lsf"), "site.provider='lsf'"),
    (BASE.replace("srun", "mpirun"), "site.mpi_launcher='mpirun'"),
    (BASE.replace("cores_per_node: 2", "cores_per_node: two"), "site.cores_per_node='two'"),
    ("- just\n- a list\n", "expected a mapping"),
    (BASE + "account: proj;rm -rf\n", "site.account='proj;rm -rf'"),
    (BASE + "partition: 'debug $(id)'\n", "site.partition="),
    (BASE + "walltime: '1 hour'\n", "site.walltime='1 hour': expected HH:MM:SS"),
    (BASE + "walltime: '02:00:00'\nmax_walltime: '01:00:00'\n", "exceeds max_walltime"),
    (BASE + "launcher_options: '--mpi=pmi2; id'\n", "is not a plain flag"),
    (BASE + "worker_init: ['module load x && id']\n", "shell metacharacters"),
    (BASE + "worker_init: ['source \"$HOME/venv\"']\n", "shell metacharacters"),
    (BASE + "scheduler_options: ['--constraint=cpu; id']\n", "expected flags"),
    (BASE + "queue: a\npartition: b\n", "not both"),
    (BASE + "shared_host: 'yes'\n", "site.shared_host='yes': expected true or false"),
    (BASE + "max_runs_in_flight: -1\n", "site.max_runs_in_flight=-1: expected an integer >= 0"),
    (BASE + "env: [A, B]\n", "site.env=['A', 'B']: expected a mapping"),
    (BASE.replace("provider: slurm", "provider: local") + "nccl_network: {plugin: P, source: x}\n",
     "site.nccl_network='P': needs a batch job"),
    (BASE + "env: {MPICH_GPU_SUPPORT_ENABLED: 1}\n", "site.env.MPICH_GPU_SUPPORT_ENABLED='1': set by each run as its "
                                                     "data path needs"),
    (BASE + "env: {'X; id': 1}\n", "site.env.X; id=1: not an environment variable name"),
    (BASE + "env: {X: [1, 2]}\n", "site.env.X=[1, 2]: expected a one-line string or number"),
    (BASE + "env: {X: \"a\\nb\"}\n", "site.env.X='a\\nb': expected a one-line string"),
    (BASE + "worker_init: ['source $HOME/scalestudy/.venv/bin/activate']\n", "activates a second Python environment"),
    (BASE + "worker_init: ['conda activate myenv']\n", "site.worker_init='conda activate myenv': activates a second"),
    (BASE + "login_shell: true\n", "site.login_shell=True: the slurm batch script here starts with Parsl's"),
    (BASE + "login_shell: 'yes'\n", "site.login_shell='yes': expected true or false"),
    (BASE + "nccl_network: {plugin: AWS Libfabric}\n", "site.nccl_network.source=None"),
    (BASE + "nccl_network: {plugin: 'a;b', source: x}\n", "site.nccl_network.plugin='a;b'"),
    (BASE + "nccl_network: {plugin: P, source: x, library_path: [lib]}\n", "site.nccl_network.library_path=['lib']"),
    (BASE + "nccl_network: {plugin: P, source: x, enabled: 'no'}\n", "site.nccl_network.enabled='no'"),
    (BASE + "nccl_network: {plugin: P, source: x, env: {NCCL_NET: Socket}}\n", "site.nccl_network.env.NCCL_NET"),
    (BASE + "nccl_network: {plugin: P, source: x, hosts: 2}\n", "site.nccl_network.hosts=2: unknown key"),
    (BASE + "env: {NCCL_CROSS_NIC: 0}\nnccl_network: {plugin: P, source: x, env: {NCCL_CROSS_NIC: 1}}\n",
     "site.env.NCCL_CROSS_NIC='0': also set by nccl_network"),
])
def test_bad_site_files_fail_clearly(tmp_path, text, words):
    path = tmp_path / "mysite.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_site(str(path))
    assert words in str(info.value) and "\n" not in str(info.value)


def test_unknown_site_lists_known_ones():
    with pytest.raises(ConfigError) as info:
        load_site("nowhere")
    assert "site='nowhere'" in str(info.value) and "local" in str(info.value)
    with pytest.raises(ConfigError):
        load_site("../../etc/passwd")


def test_overrides_are_validated_like_the_site():
    site = load_site("perlmutter")
    assert with_overrides(site, account="m1234", queue="debug", walltime="00:10:00").account == "m1234"
    for kwargs, words in (({"account": "m1;id"}, "account="), ({"queue": "q q"}, "queue="),
                          ({"walltime": "49:00:00"}, "allows at most 48:00:00")):
        with pytest.raises(ConfigError, match=words):
            with_overrides(site, **kwargs)


def test_site_env_reaches_the_batch_script_quoted(tmp_path):
    """Values are literal: a $ or a ; in them is quoted, never expanded or run."""
    from orchestrator.pools.parsl_config import worker_init

    path = tmp_path / "mysite.yaml"
    path.write_text(BASE + "env:\n  MPIR_CVAR_CH4_NETMOD: ofi\n  ODD: 'a b;$(id)'\n  N: 4\n")
    site = load_site(str(path))
    assert site.env == (("MPIR_CVAR_CH4_NETMOD", "ofi"), ("ODD", "a b;$(id)"), ("N", "4"))
    script = worker_init(site, tmp_path)
    assert "export MPIR_CVAR_CH4_NETMOD=ofi\n" in script + "\n"
    assert "export ODD='a b;$(id)'" in script and "export N=4" in script


def test_srun_runs_end_when_one_rank_fails():
    from orchestrator.site.launchers import launch_flags

    assert launch_flags(load_site("local_slurm"), 1) == "--kill-on-bad-exit=1 --cpus-per-task=1"
    assert "kill-on-bad-exit" not in launch_flags(load_site("local"), 1)


@pytest.mark.parametrize("site_name, threads_per_rank, ranks, flags", [
    # Theta, 64 cores x 4: 1 rank x 64 threads is a core each (-j 1); 2 x 64 threads need 2 per core (-j 2),
    # -d counting CPUs in that mode: 32 cores per rank, not 16 as a fixed -j 4 gave
    ("theta", 64, 1, "-d 64 -cc depth -j 1"), ("theta", 64, 2, "-d 64 -cc depth -j 2"),
    ("theta", 64, 4, "-d 64 -cc depth -j 4"), ("theta", 3, 5, "-d 3 -cc depth -j 1"),
    # Perlmutter, 128 cores x 2 logical CPUs: -c counts logical CPUs, whole cores per rank
    ("perlmutter", 64, 2, "--cpus-per-task=128"), ("perlmutter", 128, 2, "--cpus-per-task=128"),
    ("perlmutter", 1, 128, "--cpus-per-task=2"),
    # Polaris PALS: --depth is hardware threads per rank
    ("polaris", 8, 4, "--depth=8 --cpu-bind=depth"),
])
def test_binding_by_hardware_threads(site_name, threads_per_rank, ranks, flags):
    site = load_site(site_name)
    assert site.launcher.binding_flags(site, threads_per_rank, ranks) == flags


@pytest.mark.parametrize("nodes, ppn, options", [(1, 1, ""), (2, 2, ""), (4, 3, "-genv X 1")])
def test_local_runs_start_as_parsl_would_start_them(nodes, ppn, options):
    """The local site runs without Parsl; its mpiexec line is the one Parsl composes."""
    from parsl.executors.high_throughput.mpi_prefix_composer import compose_all

    from orchestrator.pools import local_mpiexec_prefix

    spec = {"num_nodes": nodes, "ranks_per_node": ppn, "num_ranks": nodes * ppn, "launcher_options": options}
    parsl_prefix = compose_all("mpiexec", spec, ["localhost"] * nodes)["PARSL_MPI_PREFIX"].strip()
    assert local_mpiexec_prefix(nodes, ppn, options) == parsl_prefix


def test_the_local_site_refuses_what_it_cannot_do(tmp_path):
    for text, words in (("provider: local\nmpi_launcher: srun\ncores_per_node: 2\nmax_nodes: 2\n",
                         "starts runs with mpiexec"),
                        ("provider: local\nmpi_launcher: mpiexec\ncores_per_node: 2\nmax_nodes: 2\n"
                         "worker_init: [module load x]\n", "runs no batch script")):
        path = tmp_path / "l.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=words):
            load_site(str(path))


def test_aprun_gets_its_node_list_as_node_ids():
    """Parsl composes ``-node-list nid03835,...``; Cray's aprun takes ``-L 3835,...``."""
    from orchestrator.site.launchers import fix_prefix

    words = ["aprun", "-n", "4", "-N", "2", "-node-list", "nid03835,nid03840", "-d", "1", "python"]
    assert fix_prefix(words) == ["aprun", "-n", "4", "-N", "2", "-L", "3835,3840", "-d", "1", "python"]
    other = ["srun", "--ntasks", "2", "--nodelist", "n1,n2"]
    assert fix_prefix(other) == other


def test_allocation_overrides_are_checked():
    from orchestrator.errors import ConfigError

    slurm = load_site("local_slurm")
    packed = with_overrides(slurm, allocation="packed", allocation_nodes=4)
    assert (packed.allocation, packed.allocation_nodes) == ("packed", 4)
    for kwargs, words in (({"allocation": "packd"}, "allocation='packd': expected per_size or packed"),
                          ({"allocation": "packed", "allocation_nodes": 8}, "allows at most 4 nodes"),
                          ({"allocation": "packed", "allocation_nodes": "4"}, "expected an integer"),
                          ({"allocation_nodes": 4}, "only a packed sweep uses it")):
        with pytest.raises(ConfigError, match=words):
            with_overrides(slurm, **kwargs)
    with pytest.raises(ConfigError, match="no batch jobs to pack"):
        with_overrides(load_site("local"), allocation="packed")


def test_a_site_network_block_is_checked(tmp_path):
    """``network:`` (model predict's interconnect) needs numbers > 0 and a source; a bad one is
    one clear error naming the key."""
    import orchestrator.site.config as sites
    from orchestrator.errors import ConfigError

    base = "provider: local\nmpi_launcher: mpiexec\ncores_per_node: 2\nmax_nodes: 2\n"
    (tmp_path / "good.yaml").write_text(base + "network: {latency_us: 1.5, node_bandwidth_gbs: 12, source: osu}\n")
    net = sites.load_site(str(tmp_path / "good.yaml")).network
    assert (net.latency_seconds, net.node_bandwidth_bytes, net.source) == (1.5e-6, 12e9, "osu")
    for body, said in (("{latency_us: -1, node_bandwidth_gbs: 1, source: x}", "site.network.latency_us=-1"),
                       ("{latency_us: 1, node_bandwidth_gbs: 1}", "site.network.source=None"),
                       ("{latency_us: 1, node_bandwidth_gbs: 1, source: x, jitter: 2}", "site.network.jitter=2"),
                       ("fast", "site.network='fast'")):
        (tmp_path / "bad.yaml").write_text(base + f"network: {body}\n")
        with pytest.raises(ConfigError, match=re.escape(said)):
            sites.load_site(str(tmp_path / "bad.yaml"))
    for name in ("theta", "polaris", "perlmutter", "local"):   # the shipped ones carry their sources
        assert sites.load_site(name).network.source


def _login_home(tmp_path, launcher: str):
    """A home whose login profile plays the facility's: Lmod's ``module`` and ``conda`` as no-op
    shell functions, and the machine's launcher (tests/fake_launchers/gpu_launchers.py, which
    grants the thread level Cray MPICH would) on PATH."""
    import sys

    from conftest import REPO

    bin_dir = tmp_path / "machine-bin"
    bin_dir.mkdir()
    (bin_dir / launcher).write_text(f"#!/bin/sh\nexec {sys.executable} "
                                    f"{REPO / 'tests' / 'fake_launchers' / 'gpu_launchers.py'} {launcher} \"$@\"\n")
    (bin_dir / launcher).chmod(0o755)
    (tmp_path / ".bash_profile").write_text(f"export PATH={bin_dir}:$PATH\nmodule() {{ :; }}\nconda() {{ :; }}\n")
    return tmp_path


@pytest.mark.mpi
@pytest.mark.parametrize("site_name, launcher, job", [("polaris", "mpiexec", "PBS_JOBID"),
                                                      ("perlmutter_gpu", "srun", "SLURM_JOB_ID")])
def test_sites_check_reports_the_thread_level_the_machines_mpi_grants(tmp_path, monkeypatch, site_name, launcher, job):
    """Inside an allocation ``sites --check`` starts one rank through the site's launcher after the
    site's set-up and reports the level MPI_Init_thread(MULTIPLE) got: MULTIPLE with the site's
    MPICH_MAX_THREAD_SAFETY, SERIALIZED (an error naming the fix) with the line taken out."""
    from orchestrator.mpi.env import findings, probe_site, render_check
    from orchestrator.site.config import site_dir

    monkeypatch.setenv("HOME", str(_login_home(tmp_path, launcher)))
    monkeypatch.setenv(job, "4242")
    monkeypatch.setenv("SLURM_GPUS_PER_NODE", "4")
    site = load_site(site_name)
    probe = probe_site(site)
    assert probe.get("thread_level") == "MULTIPLE", probe
    text = render_check(site, probe, findings(site, probe))
    assert f"ok    MPI grants MPI_THREAD_MULTIPLE (one rank through {tmp_path / 'machine-bin' / launcher} in job 4242)" \
        in text, text
    assert "threads:     MULTIPLE" in text

    lines = (site_dir() / f"{site_name}.yaml").read_text().splitlines()
    path = tmp_path / f"{site_name}.yaml"
    path.write_text("\n".join(x for x in lines if not x.startswith("  MPICH_MAX_THREAD_SAFETY:")) + "\n")
    dropped = load_site(str(path))
    probe = probe_site(dropped)
    assert probe.get("thread_level") == "SERIALIZED", probe
    [error] = [f for f in findings(dropped, probe) if "MPI_THREAD" in f.text]
    assert error.level == "error"
    assert "MPI grants MPI_THREAD_SERIALIZED" in error.text and "MPICH_MAX_THREAD_SAFETY: multiple" in error.text


@pytest.mark.parametrize("site_name", ["polaris", "perlmutter_gpu", "perlmutter", "theta", "local_slurm"])
def test_batch_jobs_set_the_sites_variables_after_its_modules(site_name):
    """What the site file sets, and this environment's bin/ first on PATH, come after every module
    and worker_init line, so that no module (ALCF's conda, NERSC's pytorch) overrides them; no
    line activates another environment."""
    from orchestrator.mpi.env import batch_environment, env_bin_dir

    site = load_site(site_name)
    lines = batch_environment(site)
    setup = [i for i, x in enumerate(lines) if x.startswith(("module ", "conda ")) or x in site.worker_init]
    path = lines.index(f"export PATH={env_bin_dir()}:\"$PATH\"")
    exports = [i for i, x in enumerate(lines) if x.startswith("export ") and not x.startswith("export PATH=")]
    names = {x.split("=", 1)[0].removeprefix("export ") for x in lines if x.startswith("export ")}
    assert max(setup, default=-1) < path < min(exports)
    assert {n for n, _ in site.env} <= names
    if site.accelerators_per_node:   # the GPU sites: NCCL's plugin and thread level, as the facilities document
        assert {"NCCL_NET", "NCCL_NET_GDR_LEVEL", "NCCL_CROSS_NIC", "FI_CXI_DISABLE_HOST_REGISTER",
                "MPICH_MAX_THREAD_SAFETY", "SCALESTUDY_NCCL_PLUGIN"} <= names
    if site.mpi == "system":
        assert "MPICH_MAX_THREAD_SAFETY" in names
    assert not any("bin/activate" in x for x in lines)


def test_a_site_turns_its_nccl_plugin_off_and_still_names_it(tmp_path):
    """nccl_network.enabled: false exports none of its settings (ALCF: the plugin hangs some
    applications), but names the plugin, so a run that then uses sockets is flagged."""
    from orchestrator.mpi.env import batch_environment
    from orchestrator.site.config import site_dir

    text = (site_dir() / "polaris.yaml").read_text().replace("  enabled: true\n", "  enabled: false\n", 1)
    path = tmp_path / "polaris.yaml"
    path.write_text(text)
    lines = batch_environment(load_site(str(path)))
    assert "export SCALESTUDY_NCCL_PLUGIN='AWS Libfabric'" in lines
    assert not any(x.startswith(("export NCCL_", "export FI_", "export LD_LIBRARY_PATH")) for x in lines)


@pytest.mark.sweep
def test_sites_check_runs_the_set_up_as_a_batch_job_would_and_names_the_command_that_fails(tmp_path):
    """A failed `module load` or a venv path that is not there: the batch script would go on,
    and the probe after it could pass ("ok" printed although the set-up failed, issue 39)."""
    from conftest import scalestudy

    from orchestrator.site.config import site_dir

    text = (site_dir() / "local_slurm.yaml").read_text()
    good = tmp_path / "setup_ok.yaml"
    good.write_text(text + "worker_init:\n  - echo setting up\n")
    bad = tmp_path / "setup_bad.yaml"
    bad.write_text(text + "worker_init:\n  - echo setting up\n  - ls /no/such/venv/bin/activate\n  - echo after\n")
    ok = scalestudy("sites", "--check", str(good), cwd=tmp_path, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    failed = scalestudy("sites", "--check", str(bad), cwd=tmp_path, timeout=300)
    assert failed.returncode == 1
    assert "the site's set-up command `ls /no/such/venv/bin/activate` failed: ls: cannot access" in failed.stdout
