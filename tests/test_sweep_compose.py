"""The sweep's job configs, composed once per config-group choice, equal Hydra's full composition."""

from __future__ import annotations

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import setup_globals
from hydra.types import RunMode
from omegaconf import OmegaConf

import hydra_plugins.scalestudy_launcher.parsl_launcher  # noqa: F401 - registers hydra/launcher=parsl
from orchestrator.sweep.schema import register
from orchestrator.sweep.compose import SweepComposer


@pytest.fixture(scope="module")
def loader():
    register()
    setup_globals()   # Hydra's resolvers (now, hydra)
    GlobalHydra.instance().clear()
    return ConfigLoaderImpl(config_search_path=create_config_search_path("pkg://orchestrator.sweep.conf"))


def _master(loader, overrides):
    return loader.load_configuration("config", overrides=overrides, run_mode=RunMode.MULTIRUN)


JOBS = [
    ["nodes=1", "batch_size=16", "+params.i=0"],
    ["nodes=2", "batch_size=16", "+params.i=1"],
    ["nodes=4", "batch_size=64", "+params.i=2"],
    ["study=eager_sgd", "nodes=2", "+params.i=3"],          # another config-group choice: another template
    ["study=eager_sgd", "nodes=4", "+params.i=4"],
    ["study=horovod_scaling", "nodes=1", "threads_per_node=4", "+params.i=5"],
]


def test_every_job_equals_hydras_full_composition(loader):
    master = _master(loader, ["hydra.sweep.dir=/tmp/x", "nodes=1,2,4", "+params.i=range(0,6)"])
    composer = SweepComposer(loader, master)
    for overrides in JOBS:
        fast, full = composer.compose(overrides), loader.load_sweep_config(master, overrides)
        assert OmegaConf.to_container(fast) == OmegaConf.to_container(full), overrides   # hydra node included
        for cfg in (fast, full):
            cfg.hydra.job.num = cfg.hydra.job.id = 7   # as the launcher and run_job set them
            cfg.hydra.runtime.output_dir = "/tmp/x/7"
        assert OmegaConf.to_container(fast, resolve=True) == OmegaConf.to_container(full, resolve=True), overrides
    # one full composition per distinct config-group choice (none, eager_sgd, horovod_scaling)
    assert composer.full_compositions == 3


def test_a_bad_value_fails_as_hydra_fails(loader):
    master = _master(loader, ["hydra.sweep.dir=/tmp/x"])
    composer = SweepComposer(loader, master)
    composer.compose(["nodes=1"])
    with pytest.raises(Exception) as fast:
        composer.compose(["nodez=2"])
    with pytest.raises(Exception) as full:
        loader.load_sweep_config(master, ["nodez=2"])
    assert type(fast.value) is type(full.value) and "nodez" in str(fast.value)
