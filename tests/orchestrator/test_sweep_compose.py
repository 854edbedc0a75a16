"""The sweep's job configs, composed once per config-group choice, equal Hydra's full composition.

Hydra through its public interfaces only (``initialize_config_module``, the ``ConfigLoader`` the
launcher is handed): run on the Hydra floor and on the newest 1.3 release by ``.ci/run``."""

from __future__ import annotations

import copy

import pytest
from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.singleton import Singleton
from hydra.core.utils import setup_globals
from hydra.types import RunMode
from omegaconf import OmegaConf

import hydra_plugins.scalestudy_launcher.parsl_launcher  # noqa: F401 - registers hydra/launcher=parsl
from orchestrator.sweep.compose import SweepComposer
from orchestrator.sweep.schema import register


@pytest.fixture(scope="module")
def loader():
    saved = copy.deepcopy(Singleton.get_state())   # Hydra's version base, its config store...
    register()
    setup_globals()   # Hydra's resolvers (now, hydra)
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="orchestrator.sweep.conf", version_base="1.3"):
        yield GlobalHydra.instance().config_loader()
    GlobalHydra.instance().clear()
    Singleton.set_state(saved)   # as they were: the version base outlives the context (Hydra 1.3.2)


def _master(loader, overrides):
    return loader.load_configuration("config", overrides=overrides, run_mode=RunMode.MULTIRUN)


def _same(composer, loader, master, overrides):
    fast, full = composer.compose(overrides), loader.load_sweep_config(master, overrides)
    assert OmegaConf.to_container(fast) == OmegaConf.to_container(full), overrides   # hydra node included
    for cfg in (fast, full):
        cfg.hydra.job.num = cfg.hydra.job.id = 7   # as the launcher and run_job set them
        cfg.hydra.runtime.output_dir = "/tmp/x/7"
    assert OmegaConf.to_container(fast, resolve=True) == OmegaConf.to_container(full, resolve=True), overrides


JOBS = [
    ["nodes=1", "batch_size=16", "+params.i=0"],
    ["nodes=2", "batch_size=16", "+params.i=1"],
    ["nodes=4", "batch_size=64", "+params.i=2"],
    ["study=eager_sgd", "nodes=2", "+params.i=3"],          # another config-group choice: another template
    ["study=eager_sgd", "nodes=4", "+params.i=4"],
    ["study=horovod_scaling", "nodes=1", "threads_per_node=4", "+params.i=5"],
    ["nodes=2", "++params.j=x", "lr=0.5"],                  # force-add, a float
    ["nodes=2", "+params.k={a: 1, b: [1, 2]}"],             # a dict added
    ["batch_size=32", "study_name=with spaces"],
]


def test_every_job_equals_hydras_full_composition(loader):
    master = _master(loader, ["hydra.sweep.dir=/tmp/x", "nodes=1,2,4", "+params.i=range(0,6)"])
    composer = SweepComposer(loader, master)
    for overrides in JOBS:
        _same(composer, loader, master, overrides)
    # one full composition per distinct config-group choice (none, eager_sgd, horovod_scaling)
    assert composer.full_compositions == 3


@pytest.mark.parametrize("overrides", [
    ["nodes=2", "~seed"],                     # a deletion
    ["nodes=2", "+nodes=3"],                  # + on a key that is there: Hydra's error...
    ["hydra.job.name=other", "nodes=2"],      # a Hydra override
], ids=["delete", "add-existing", "hydra-override"])
def test_what_is_not_a_plain_value_takes_hydras_own_path(loader, overrides):
    master = _master(loader, ["hydra.sweep.dir=/tmp/x"])
    composer = SweepComposer(loader, master)
    try:
        loader.load_sweep_config(master, overrides)
    except Exception as exc:   # ...and the same error from the composer
        with pytest.raises(type(exc)) as fast:
            composer.compose(overrides)
        assert str(fast.value) == str(exc)
        return
    _same(composer, loader, master, overrides)


def test_a_bad_value_fails_as_hydra_fails(loader):
    master = _master(loader, ["hydra.sweep.dir=/tmp/x"])
    composer = SweepComposer(loader, master)
    composer.compose(["nodes=1"])
    for bad in (["nodez=2"], ["nodes.x=1"]):
        with pytest.raises(Exception) as fast:
            composer.compose(bad)
        with pytest.raises(Exception) as full:
            loader.load_sweep_config(master, bad)
        assert type(fast.value) is type(full.value) and str(fast.value) == str(full.value)
