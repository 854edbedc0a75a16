"""Emulated compute: forward and backward replaced by sleeps, everything that communicates real.

With ``compute=emulated`` a rank does not compute its model's forward and backward; it
sleeps for times drawn from a *compute profile* recorded on a real run (``scalestudy
profile RUN_ID``). The model's parameters stay real (same names, sizes, dtypes), and
backward stays a real autograd pass: a chain of sleeping nodes, one per parameter, so
each parameter's gradient is accumulated, and every engine's hooks fire (our ``sync``
engine's, DDP's reducer, Horovod's), in the recorded order and at the recorded moments.
Fusion, cycle time, the MPI collectives, eager rounds, the parameter server and injected
imbalance are all the real code. A sleeping rank leaves its core to the others, so 8-64
ranks fit on a 2-core machine (what the collectives themselves cost still shares it).

Draws: each step a rank picks one recorded step of one recorded rank at random (its own
RNG, seeded by the run's seed and the rank) and sleeps that step's forward and backward
times, so their spread and their correlation are the recorded ones. Within backward,
gradient k is handed over at the recorded fraction of backward at which it was ready
(from the timeline's ``grad_ready`` events; without a timeline, evenly in reverse
parameter order). Sleeps aim at absolute deadlines, so the timer's overshoot does not
add up over a backward's tensors.

Gradients are zeros and evaluation is skipped (accuracy is not measured): an emulated
run measures time, nothing else.

``compute=padded`` (``PaddedCompute``) is the other way round: the model computes for real
(real gradients, real evaluations: time to a target loss means something), and each training
step's forward and backward are then held until they have lasted at least the profile's drawn
times, drawn as above. It gives a cheap model the compute time of a paper's step (eager-SGD's
hyperplane regression: ``profiles/paper_hyperplane.json``). Forward sleeps at its end; each
gradient is held, before it is accumulated and before any engine's hook sees it, until the
profile's fraction of the drawn backward time (from the step's start of backward) has passed,
so the engines see gradients at the profiled moments. Where the real compute is slower than the
profile nothing is held: a padded step lasts max(real, profiled).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from .registry import COMPUTE_KINDS, computes_for_real  # noqa: F401 - re-exported

PROFILE_SCHEMA = 1


SHIPPED_PROFILES = Path(__file__).resolve().parent / "profiles"


def shipped_profile(name: str) -> Path | None:
    """A profile shipped with scalestudy, named without a folder or ``.json``
    (``compute_profile=paper_resnet50_p100``): the papers' settings, whose GPUs this machine
    has not got (``workloads/profiles/``; each names where its times come from)."""
    if "/" in name or name.endswith(".json"):
        return None
    path = SHIPPED_PROFILES / f"{name}.json"
    return path if path.is_file() else None


@dataclass(frozen=True)
class ComputeProfile:
    """What a real run's compute cost: per recorded step and rank, forward and backward
    seconds; per parameter (by name), the fraction of backward elapsed when its gradient
    was ready; where it came from."""

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    ready_fraction: dict[str, float]
    source: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps({"schema": PROFILE_SCHEMA, "source": self.source, "forward": list(self.forward),
                           "backward": list(self.backward), "ready_fraction": self.ready_fraction}, indent=1)

    @classmethod
    def load(cls, path: str | Path) -> "ComputeProfile":
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"compute_profile={str(path)!r}: cannot read it ({exc})") from exc
        if not isinstance(raw, dict) or raw.get("schema") != PROFILE_SCHEMA:
            raise ValueError(f"compute_profile={str(path)!r}: not a compute profile of schema {PROFILE_SCHEMA} "
                             "(make one with: scalestudy profile RUN_ID -o FILE)")
        forward, backward = tuple(map(float, raw["forward"])), tuple(map(float, raw["backward"]))
        if not forward or len(forward) != len(backward) or min(forward + backward) < 0:
            raise ValueError(f"compute_profile={str(path)!r}: needs as many forward as backward times, "
                             "at least one, none negative")
        return cls(forward, backward, {str(k): float(v) for k, v in raw.get("ready_fraction", {}).items()},
                   dict(raw.get("source", {})))


def _ready_order(model: nn.Module, profile: ComputeProfile) -> tuple[list[nn.Parameter], list[float], bool]:
    """The model's trainable parameters in the order the profile's backward had their gradients
    ready, each with the fraction of backward elapsed by then, and whether the profile's timeline
    named them all (else: evenly through backward, in reverse parameter order, backprop's rough
    order)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    known = profile.ready_fraction
    matched = bool(named) and all(n in known for n, _ in named)
    if matched:
        ready = sorted(named, key=lambda np_: known[np_[0]])
        fractions = [known[n] for n, _ in ready]
    else:
        ready = list(reversed(named))
        fractions = [(i + 1) / len(ready) for i in range(len(ready))]
    return [p for _, p in ready], fractions, matched


class _SleepUntil(torch.autograd.Function):
    """Identity forward; its backward sleeps until a deadline within this backward pass."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, clock: "_BackwardClock", fraction: float) -> torch.Tensor:
        ctx.clock, ctx.fraction = clock, fraction
        return h.view_as(h)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.clock.sleep_until(ctx.fraction)
        return grad, None, None


class _BackwardClock:
    """One step's backward: when it began and how long it is to last."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.seconds = 0.0

    def sleep_until(self, fraction: float) -> None:
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        delay = self.start + fraction * self.seconds - now
        if delay > 0:
            time.sleep(delay)


class EmulatedForward:
    """Replaces a model's ``forward``: sleeps the drawn forward time and returns logits
    whose backward is the chain of sleeps (see the module docstring)."""

    def __init__(self, model: nn.Module, profile: ComputeProfile, seed: int, rank: int,
                 logits_shape: Callable[[torch.Tensor], tuple[int, ...]]) -> None:
        self.model = model
        self.profile = profile
        self.rng = np.random.default_rng([int(seed), int(rank), 0xE7])
        self.logits_shape = logits_shape
        self.ready_order, self.fractions, self.matched_timeline = _ready_order(model, profile)
        self.drawn: list[int] = []   # the recorded step each training forward drew (its index)

    def __call__(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        t0 = time.perf_counter()
        shape = self.logits_shape(x)
        if not self.model.training:   # evaluation: not emulated, not measured
            return torch.zeros(shape)
        i = int(self.rng.integers(len(self.profile.forward)))
        self.drawn.append(i)
        clock = _BackwardClock()
        clock.seconds = self.profile.backward[i]
        # built from the last-ready gradient outward: the first-ready one's sleep is the
        # outermost node, so backward meets them in ready order
        h = None
        for p, fraction in zip(reversed(self.ready_order), reversed(self.fractions)):
            s = (p * 0).sum()
            h = s if h is None else h + s
            h = _SleepUntil.apply(h, clock, fraction)
        logits = torch.zeros(shape) + (h if h is not None else 0.0)
        delay = t0 + self.profile.forward[i] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        return logits


def emulate_compute(model: nn.Module, profile: ComputeProfile, seed: int, rank: int,
                    sample_input: torch.Tensor) -> EmulatedForward:
    """Make ``model`` an emulated one in place (its ``forward`` replaced) and return the
    replacement. ``sample_input`` (one real batch) runs once through the real forward, to
    learn the shape of the logits."""
    with torch.no_grad():
        was = model.training
        model.eval()
        out = model(sample_input[:1])
        model.train(was)
    trailing = tuple(out.shape[2:]) if out.dim() == 3 else tuple(out.shape[1:])

    def logits_shape(x: torch.Tensor) -> tuple[int, ...]:
        return (x.shape[0], x.shape[1], *trailing) if out.dim() == 3 else (x.shape[0], *trailing)

    emulated = EmulatedForward(model, profile, seed, rank, logits_shape)
    model.forward = emulated   # an instance attribute: nn.Module.__call__ (and DDP) call it
    return emulated


class _StartBackward(torch.autograd.Function):
    """Identity forward on the model's output; its backward, the first of the model's backward
    nodes to run, starts the step's backward clock."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, clock: "_BackwardClock") -> torch.Tensor:
        ctx.clock = clock
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.clock.start = time.perf_counter()
        return grad, None


class PaddedCompute:
    """``compute=padded``: real forward and backward, each held until it has lasted at least the
    profile's drawn time (the module docstring says how). Installed as hooks on the model (a
    forward pre-hook and hook, a hook on each trainable parameter's gradient); only training
    passes (the model in training mode, autograd on) are padded, never evaluations."""

    def __init__(self, model: nn.Module, profile: ComputeProfile, seed: int, rank: int) -> None:
        self.profile = profile
        self.rng = np.random.default_rng([int(seed), int(rank), 0xE7])   # emulation's draws
        self.ready_order, self.fractions, self.matched_timeline = _ready_order(model, profile)
        self.drawn: list[int] = []      # the recorded step each training forward drew (its index)
        self.overran = 0                # training forwards whose real compute outlasted the profile's
        self._t0 = 0.0
        self._draw = -1
        self._clock: _BackwardClock | None = None
        self.handles = [model.register_forward_pre_hook(self._before), model.register_forward_hook(self._after)]
        self.handles += [p.register_hook(partial(self._hold, fraction))
                         for p, fraction in zip(self.ready_order, self.fractions)]

    def _before(self, module: nn.Module, args) -> None:
        if not (module.training and torch.is_grad_enabled()):
            self._clock = None   # an evaluation: computed, not padded
            return
        self._t0 = time.perf_counter()
        self._draw = int(self.rng.integers(len(self.profile.forward)))
        self.drawn.append(self._draw)
        self._clock = _BackwardClock()
        self._clock.seconds = self.profile.backward[self._draw]

    def _after(self, module: nn.Module, args, output):
        clock = self._clock
        if clock is None:
            return None
        delay = self._t0 + self.profile.forward[self._draw] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        else:
            self.overran += 1
        if isinstance(output, torch.Tensor) and output.requires_grad:
            return _StartBackward.apply(output, clock)
        return None   # not one tensor: backward's clock starts at the first gradient

    def _hold(self, fraction: float, grad: torch.Tensor) -> None:
        clock = self._clock
        if clock is None:
            return None
        clock.sleep_until(fraction)
        return None

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def pad_compute(model: nn.Module, profile: ComputeProfile, seed: int, rank: int) -> PaddedCompute:
    """Make ``model``'s training steps last at least ``profile``'s times (``compute=padded``)."""
    return PaddedCompute(model, profile, seed, rank)
