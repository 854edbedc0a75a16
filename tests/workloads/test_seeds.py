"""Issue 54, item 4: repeats vary the seed (``seed_per_repeat``, on by default), so that a
configuration's accuracy has a spread over its repeats; a sweep that fixes it keeps one seed;
runs stored before the key existed keep their keys and resume as before."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.sweep.runspec import build_run_spec, run_key
from workloads.spec import REPEAT_SEED_STRIDE, RunSpec


def test_repeats_train_with_seeds_of_their_own_unless_fixed():
    assert RunSpec(seed=3, repeat=0).run_seed == 3
    assert RunSpec(seed=3, repeat=2).run_seed == 3 + 2 * REPEAT_SEED_STRIDE
    assert RunSpec(seed=3, repeat=2, seed_per_repeat=False).run_seed == 3
    run = RunSpec(seed=3, repeat=2).as_run()
    assert run.seed == 2003 and run.as_run().seed == 2003   # not added twice
    # a sweep of seeds and its repeats stay apart: 3 seeds x 3 repeats are 9 seeds
    assert len({RunSpec(seed=s, repeat=r).run_seed for s in range(3) for r in range(3)}) == 9


def test_stored_runs_keep_their_keys_and_a_fixed_seed_is_a_run_of_its_own():
    varied = build_run_spec({"study_name": "k", "repeat": 2})
    stored = varied.to_dict()
    del stored["seed_per_repeat"]   # a spec written before the key existed
    assert run_key(RunSpec.from_dict(stored)) == run_key(varied)
    fixed = build_run_spec({"study_name": "k", "repeat": 2, "seed_per_repeat": False})
    assert fixed.run_seed == 0 and run_key(fixed) != run_key(varied)
    # where it changes nothing it is kept at its default: one key whatever was set
    first = build_run_spec({"study_name": "k", "repeat": 0, "seed_per_repeat": False})
    assert first.seed_per_repeat and run_key(first) == run_key(build_run_spec({"study_name": "k"}))
    command = build_run_spec({"study_name": "k", "repeat": 1, "seed_per_repeat": False,
                              "workload": {"kind": "command", "command": ["true"]}})
    assert command.seed_per_repeat
    with pytest.raises(ConfigError) as err:
        build_run_spec({"study_name": "k", "repeat": 1, "seed_per_repeat": "yes"})
    assert err.value.field == "seed_per_repeat"


class _Comm:
    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1


@pytest.mark.parametrize("spec, seed", [(RunSpec(seed=5, repeat=1), 1005),
                                        (RunSpec(seed=5, repeat=1, seed_per_repeat=False), 5)])
def test_the_training_loop_draws_everything_from_the_runs_seed(monkeypatch, spec, seed):
    """Data, model, delays, emulation and the gradient engine (eager-SGD's initiator) all read
    the spec ``_train_loop`` hands them: its seed is the run's."""
    import workloads.train as train

    seen = []

    def stop(run_spec, rank, device):
        seen.append(run_spec)
        raise RuntimeError("stop here")

    monkeypatch.setattr(train, "_build", stop)
    with pytest.raises(RuntimeError, match="stop here"):
        train._train_loop(spec, _Comm(), None, None, None, None, {})
    assert seen[0].seed == seed and train.delay_injector(seen[0], 1).seed == seed


def test_two_repeats_start_from_different_weights_and_data_orders():
    import torch

    from workloads.data import GlobalBatchSampler
    from workloads.models import build_model

    first, second = RunSpec(repeat=0).as_run(), RunSpec(repeat=1).as_run()
    weights = [next(build_model("small_cnn", (1, 8, 8), 10, s.seed).parameters()).detach().clone()
               for s in (first, second)]
    assert not torch.equal(*weights)
    orders = [[int(i) for i in next(GlobalBatchSampler(64, 8, 0, 1, s.seed).epoch(0))] for s in (first, second)]
    assert orders[0] != orders[1]
