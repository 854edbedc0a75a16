"""``hydra/sweeper=scalestudy`` runs the jobs Hydra's basic sweeper runs, in the same order and
batches, with the same failures (orchestrator/sweep/sweeper.py, on Hydra's public Sweeper
interface). Real Hydra multiruns through Hydra's own test runner, with its basic launcher;
``.ci/run`` runs this on the Hydra floor and the newest 1.3 release."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

import hydra_plugins.scalestudy_launcher.parsl_launcher  # noqa: F401 - registers hydra/sweeper=scalestudy


def _task(cfg):
    if cfg.get("fail"):
        raise ValueError(f"job with x={cfg.x} failed")
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.fixture
def sweep(hydra_sweep_runner, tmp_path):
    made = []

    def run(sweeper: str, overrides: list[str], config_name: str = "config"):
        made.append(tmp_path / f"{sweeper}-{len(made)}")
        return _sweep(hydra_sweep_runner, made[-1], sweeper, overrides, config_name)

    return run


def _sweep(runner, folder, sweeper: str, overrides: list[str], config_name: str = "config"):
    with runner(calling_file=__file__, calling_module=None, task_function=_task, config_path="sweeper_conf",
                config_name=config_name, overrides=[f"hydra/sweeper={sweeper}", *overrides],
                temp_dir=folder) as sweep:
        return [[(list(r.overrides), r.return_value) for r in batch] for batch in sweep.returns]


@pytest.mark.parametrize("overrides", [
    ["x=1,2", "+y=range(3)"],
    ["db=glob(*)", "+y=choice(u,v)"],                      # a config group's options, by glob
    ["x=1,2", "x=3,4"],                                    # a key given twice: once, the last values
    ["db=postgresql", "x=7"],                              # nothing swept: one job
    ["x=range(5)", "hydra.sweeper.max_batch_size=2"],      # in batches of two
], ids=["product", "glob", "repeated-key", "one-job", "batches"])
@pytest.mark.sweep
def test_the_jobs_are_the_basic_sweepers(sweep, overrides):
    ours = sweep("scalestudy", overrides)
    assert ours == sweep("basic", overrides)
    assert sum(len(batch) for batch in ours) > 1 or overrides == ["db=postgresql", "x=7"]


@pytest.mark.sweep
def test_the_configs_sweep_params_come_first(sweep):
    ours = sweep("scalestudy", ["+z=1,2"], config_name="params")
    assert ours == sweep("basic", ["+z=1,2"], config_name="params")
    assert [o for o, _ in ours[0]][0] == ["x=5", "+p=a", "+z=1"]


def test_a_failed_job_is_raised_after_its_batch_as_the_basic_sweeper_does(sweep):
    for sweeper in ("scalestudy", "basic"):
        with pytest.raises(ValueError, match="job with x=1 failed"):
            sweep(sweeper, ["x=1,2", "+fail=true"])


def test_a_sweep_kind_it_cannot_expand_is_refused(sweep):
    with pytest.raises(Exception, match="does not support sweep type : INTERVAL_SWEEP"):
        sweep("scalestudy", ["x=interval(0,1)"])
