"""Validation of job configs into RunSpecs, and run identity."""

from __future__ import annotations

import importlib.util

import pytest

from orchestrator.errors import ConfigError
from orchestrator.sweep.runspec import build_run_spec, run_key

BASE = dict(study_name="t", site="local", nodes=2, workers_per_node=2, threads_per_node=4, batch_size=8,
            algorithm="sync", model="small_cnn", dataset="digits", epochs=1, steps_per_epoch=None,
            lr=0.1, momentum=0.9, seed=0)


def test_valid_config_builds_a_spec():
    spec = build_run_spec(BASE)
    assert spec.world_size == 4 and spec.threads_per_worker == 2 and spec.global_batch_size == 32


@pytest.mark.parametrize("field, value, words", [
    ("nodes", 0, "must be >= 1"),
    ("nodes", 9, "at most 8 nodes"),
    ("batch_size", -1, "must be >= 1"),
    ("workers_per_node", "abc", "expected an integer"),
    ("workers_per_node", 1.5, "expected an integer"),
    ("threads_per_node", 3, "whole multiple of workers_per_node=2"),
    ("threads_per_node", True, "expected an integer"),
    ("site", "nowhere", "unknown site"),
    ("algorithm", "nope", "unknown algorithm"),
    pytest.param("algorithm", "horovod", "needs Horovod", marks=pytest.mark.skipif(
        importlib.util.find_spec("horovod") is not None, reason="Horovod is installed here")),
    ("device", "tpu", "unknown device"),
    ("device", "cuda", "site local declares no GPUs (accelerators_per_node: 0)"),
    ("data_path", "host_staging", "algorithm sync on cpu moves gradients through mpi or torch_distributed"),
    ("data_path", "ucx", "unknown data_path"),
    ("fusion_threshold_mb", -1, "must be >= 0"),
    ("cycle_time_ms", 0, "must be > 0"),
    ("timeline", "yes", "expected true or false"),
    ("autotune", "yes", "expected true or false"),
    ("model", "lstm", "takes sequence inputs but dataset digits holds images"),
    ("sync_every", -1, "must be >= 0"),
    ("model", "resnet1000", "unknown model"),
    ("lr", 0, "must be > 0"),
    ("lr", float("nan"), "finite"),
    ("seed", -1, "must be >= 0"),
    ("study_name", "a b;rm", "expected a name"),
])
def test_bad_values_name_field_and_value(field, value, words):
    with pytest.raises(ConfigError) as info:
        build_run_spec({**BASE, field: value})
    message = str(info.value)
    assert f"{field}={value!r}" in message and words in message
    assert "\n" not in message


def test_run_key_is_semantic():
    a = build_run_spec(BASE)
    assert run_key(a) == run_key(build_run_spec(dict(BASE)))
    assert run_key(a) == run_key(build_run_spec({**BASE, "study_name": "other"}))  # study is not part of the run
    assert run_key(a) != run_key(build_run_spec({**BASE, "batch_size": 16}))
    assert run_key(a) != run_key(build_run_spec({**BASE, "seed": 1}))


def test_config_error_survives_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(ConfigError("nodes", 0, "must be >= 1")))
    assert str(err) == "invalid config: nodes=0: must be >= 1"


def test_datasets_that_read_files_need_a_path():
    with pytest.raises(ConfigError, match="dataset_path=None: dataset cifar10 reads local files"):
        build_run_spec({**BASE, "dataset": "cifar10"})
    spec = build_run_spec({**BASE, "dataset": "cifar10", "dataset_path": "/data/c10"})
    assert spec.dataset == "cifar10" and spec.dataset_path == "/data/c10"
    # where the data lies is not part of the run's identity
    assert run_key(spec) == run_key(build_run_spec({**BASE, "dataset": "cifar10", "dataset_path": "/other"}))


@pytest.mark.parametrize("imbalance, field, words", [
    ({"kind": "sometimes"}, "imbalance.kind='sometimes'", "unknown imbalance.kind"),
    ({"kind": "injected", "ranks": 5, "delay_ms": 10}, "imbalance.ranks=5", "more than the run's 4 ranks"),
    ({"kind": "injected", "delay_ms": -3}, "imbalance.delay_ms=-3", "must be >= 0"),
    ({"kind": "fixed", "rank": 4}, "imbalance.rank=4", "expected a rank"),
    ({"kind": "inherent"}, "imbalance.kind='inherent'", "set model=lstm dataset=sequences"),
    ({"kind": "injected", "dealy_ms": 5}, "imbalance.dealy_ms=5", "unknown key"),
])
def test_bad_imbalance(imbalance, field, words):
    with pytest.raises(ConfigError) as info:
        build_run_spec({**BASE, "imbalance": imbalance})
    assert field in str(info.value) and words in str(info.value)


def test_imbalance_and_eager_fields_reach_the_spec():
    spec = build_run_spec({**BASE, "algorithm": "eager_solo", "sync_every": 5,
                           "imbalance": {"kind": "injected", "ranks": 1, "delay_ms": 20}})
    assert (spec.algorithm, spec.sync_every, spec.imbalance_kind, spec.imbalance_delay_ms) == ("eager_solo", 5, "injected", 20.0)
    assert run_key(spec) != run_key(build_run_spec({**BASE, "algorithm": "eager_solo", "sync_every": 5,
                                                    "imbalance": {"kind": "injected", "ranks": 1, "delay_ms": 40}}))
    with pytest.raises(ConfigError, match="needs at least 2 ranks"):
        build_run_spec({**BASE, "nodes": 1, "workers_per_node": 1, "threads_per_node": 1, "algorithm": "async_ps"})
    inherent = build_run_spec({**BASE, "model": "lstm", "dataset": "sequences", "imbalance": {"kind": "inherent"}})
    assert inherent.imbalance_kind == "inherent"


def test_autotune_only_where_there_is_a_cycle_time():
    assert build_run_spec({**BASE, "autotune": True}).autotune is True
    for algorithm in ("ddp", "eager_solo"):
        with pytest.raises(ConfigError) as info:
            build_run_spec({**BASE, "algorithm": algorithm, "autotune": True})
        assert str(info.value) == (f"invalid config: autotune=True: tunes the cycle time of sync and horovod; "
                                   f"algorithm={algorithm} has none")
