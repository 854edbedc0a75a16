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
    (BASE + "env: {'X; id': 1}\n", "site.env.X; id=1: not an environment variable name"),
    (BASE + "env: {X: [1, 2]}\n", "site.env.X=[1, 2]: expected a one-line string or number"),
    (BASE + "env: {X: \"a\\nb\"}\n", "site.env.X='a\\nb': expected a one-line string"),
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
