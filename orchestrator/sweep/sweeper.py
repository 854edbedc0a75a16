"""``hydra/sweeper=scalestudy``: Hydra's basic sweep, on Hydra's public Sweeper interface.

Hydra's basic sweeper composes every job of a batch once (``validate_batch_is_legal``) before
handing the batch to the launcher, only to throw the configs away: a tenth of a second a job
here (``benchmarks/bench_overhead.py``). The Parsl launcher composes each job itself, all of
them before it submits anything, so with it that check would only compose every job twice.
This sweeper does what the basic one does — the cartesian product of the sweep overrides
(``a=1,2 b=range(3)``, ``study=glob(*)``), ``hydra.sweeper.params`` before the command
line's, ``max_batch_size``, ``multirun.yaml`` in the sweep folder, a failed job raised after
its batch — and skips only that check, and only for the Parsl launcher. Its parts are the
ones Hydra's plugin documentation and its own sweeper plugins use: ``Sweeper``,
``Plugins.instantiate_launcher``, ``OverridesParser`` and the ``Override`` methods for sweeps.
``tests/orchestrator/test_sweeper.py`` checks its jobs equal the basic sweeper's, on each Hydra CI runs.
A study of the user's own (``study_name=`` given, ``study=`` not) takes no grid from the default
preset: its ``hydra.sweeper.params`` are left out, and it sweeps what the command line sweeps
(``preset``). With ``repeats.until`` it decides, from the rule it was given and what the first
phase's runs measured (``SweepObserver.measured``, through the launcher), the repeats each
configuration still needs, and runs them as a second phase (``repeats_on_demand``).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


def job_overrides(overrides: Sequence[Override]) -> List[List[str]]:
    """Every job's override lines: one value of each swept key, in the cartesian product's order
    (a key given twice counts once, where it was first given, with its last value)."""
    by_key: Dict[str, List[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise HydraException(f"{ScalestudySweeper.__name__} does not support sweep type : "
                                     f"{override.value_type.name if override.value_type else override.input_line}")
            by_key[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            by_key[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*by_key.values())]


def batches(jobs: List[List[str]], max_batch_size: Optional[int]) -> List[List[List[str]]]:
    if max_batch_size is None or max_batch_size == -1:
        return [jobs]
    if max_batch_size < 1:
        raise HydraException(f"hydra.sweeper.max_batch_size={max_batch_size}: expected a positive number or null")
    return [jobs[i:i + max_batch_size] for i in range(0, len(jobs), max_batch_size)] or [[]]


class ScalestudySweeper(Sweeper):
    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.hydra_context: Optional[HydraContext] = None
        self.config: Optional[DictConfig] = None
        self.launcher: Optional[Launcher] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                               task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        from .preset import grid_applies

        params = self.params if grid_applies(arguments) else {}   # a study of the user's own: no preset grid
        lines = [f"{key}={value}" for key, value in params.items()] + list(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        parsed = parser.parse_overrides(lines)
        jobs = job_overrides(parsed)
        rule = self._repeat_rule(parsed, jobs)
        if rule is not None:   # every run records the first stage's size: compare reads it
            jobs = [[*job, f"repeats.first_stage={rule.first_stage}"] for job in jobs]
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns: List[Sequence[JobReturn]] = []
        initial_job_idx = 0
        first_stage: Dict[int, tuple] = {}   # job idx -> (its overrides, its spec, its value): the rule's
        for batch in batches(jobs, self.max_batch_size):
            start, initial_job_idx = initial_job_idx, self._launch(batch, initial_job_idx, returns)
            if rule is not None:
                measured = self.launcher.measured(rule.metric)
                first_stage.update({i: (batch[i - start], *measured[i]) for i in range(start, initial_job_idx)
                                    if i in measured})
        follow_ups = self._follow_ups(rule, first_stage) if rule is not None and first_stage else []
        if follow_ups:   # repeats on demand: the second phase, decided by the first
            for batch in batches(follow_ups, self.max_batch_size):
                initial_job_idx = self._launch(batch, initial_job_idx, returns)
        return returns

    @staticmethod
    def _follow_ups(rule, first_stage: Dict[int, tuple]) -> List[List[str]]:
        """The repeats each configuration still needs (``repeats_on_demand.decide``), said in one line."""
        from .repeats_on_demand import decide, follow_up_jobs, summary
        from .runspec import run_key

        specs = {i: (first_stage[i][0], first_stage[i][1]) for i in first_stage}
        values = {run_key(spec): value for _, spec, value in first_stage.values() if value is not None}
        decisions = decide(rule, specs, values)
        print(summary(rule, decisions), file=sys.stderr, flush=True)   # beside the sweep's progress
        return follow_up_jobs(decisions, rule.first_stage)

    def _launch(self, batch: List[List[str]], initial_job_idx: int, returns: List[Sequence[JobReturn]]) -> int:
        from .launcher import ParslLauncher

        assert self.launcher is not None
        if not isinstance(self.launcher, ParslLauncher):   # it composes every job itself, first
            self.validate_batch_is_legal(batch)
        results = self.launcher.launch(batch, initial_job_idx=initial_job_idx)
        for result in results:
            _ = result.return_value   # a failed job raises here, as with Hydra's basic sweeper
        returns.append(results)
        return initial_job_idx + len(batch)

    def _repeat_rule(self, parsed: Sequence[Override], jobs: List[List[str]]):
        """Repeats on demand, checked before anything runs (one line naming the key)."""
        from .repeats_on_demand import first_stage, rule_of

        assert self.config is not None
        for override in parsed:
            key = override.get_key_element().lstrip("+")
            if key.startswith("repeats.") and override.is_sweep_override():
                from ..errors import ConfigError
                raise ConfigError(key, override.input_line, "repeats.* set the sweep's rule: one value, not a sweep")
        if OmegaConf.select(self.config, "repeats.until") is None:
            return None
        from .launcher import ParslLauncher

        if not isinstance(self.launcher, ParslLauncher):   # only its observer says what the runs measured
            from ..errors import ConfigError
            raise ConfigError("repeats.until", OmegaConf.select(self.config, "repeats.until"),
                              "repeats on demand run through scalestudy's launcher (hydra/launcher=parsl)")
        return rule_of(self.config, first_stage(jobs))
