"""Sites load from YAML and are validated in full."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.sites import known_sites, load_site


def test_local_site_loads():
    site = load_site("local")
    assert site.provider == "local" and site.mpi_launcher == "mpiexec" and site.max_nodes >= 4
    assert "local" in known_sites() and "template" not in known_sites()


@pytest.mark.parametrize("text, words", [
    ("provider: local\nmpi_launcher: mpiexec\ncores_per_node: 2\nmax_nodes: 2\nqueue_nme: x\n", "site.queue_nme"),
    ("provider: local\nmpi_launcher: mpiexec\ncores_per_node: 2\n", "site.max_nodes=None: required"),
    ("provider: lsf\nmpi_launcher: mpiexec\ncores_per_node: 2\nmax_nodes: 2\n", "site.provider='lsf'"),
    ("provider: local\nmpi_launcher: mpirun\ncores_per_node: 2\nmax_nodes: 2\n", "site.mpi_launcher='mpirun'"),
    ("provider: local\nmpi_launcher: mpiexec\ncores_per_node: two\nmax_nodes: 2\n", "site.cores_per_node='two'"),
    ("- just\n- a list\n", "expected a mapping"),
])
def test_bad_site_files_fail_clearly(tmp_path, text, words):
    path = tmp_path / "mysite.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=None) as info:
        load_site(str(path))
    assert words in str(info.value)


def test_unknown_site_lists_known_ones():
    with pytest.raises(ConfigError) as info:
        load_site("nowhere")
    assert "site='nowhere'" in str(info.value) and "local" in str(info.value)
