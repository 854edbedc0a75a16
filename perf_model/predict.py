"""Predicted step time, throughput and efficiency at rank counts not measured.

A step of P ranks (``perf_model.terms``):

    T(P) = C + W(P) + (1 - h) A(P) + U + O(P)

- C, the compute of one rank (the fitted ``compute`` term at the study's batch and threads);
- W(P), the wait for other ranks: for synchronous algorithms (sync, ddp, horovod) the
  slowest of P ranks, plus the injected sleep when the study injects one: the larger of
  the normal form (``injected_wait_sync``, noise sigma) and the measured distribution's
  (``injected_wait_sample``); for eager-SGD the slowest rank over a segment of
  ``sync_every`` steps (``injected_wait_eager``; over a segment the sum of steps is close
  to normal), and for ``eager_majority`` also the wait for each round's initiator
  (``majority_wait``) — the lock-step mechanism (``eager_catch_up=lockstep``, and every fit
  of runs from before catch-up); where a late rank catches up (``apply_all``, the default,
  or ``latest``) W is what the mechanism's simulation gives (``eager_rounds.eager_steps``:
  a rank's mean recorded step less C), and with ``apply_all`` the update counts once per
  round taken, more than one per gradient computed;
- A(P) = m 2 ceil(log2 P) lat + 2(P - 1)/P N / bw, the step's m collectives of N bytes in
  all (``terms.allreduce_seconds``: MPICH's reduce-scatter + allgather), with lat and the
  per-rank bw fitted on this machine; or, with a site's ``network:`` (``Network``: latency,
  bandwidth B per node), m 2 ceil(log2 P) lat + L / B, L what one node's link carries for the
  algorithm's allreduce (``workloads.allreduce_traffic.node_link_bytes``, ``TRAFFIC``: over k
  nodes L = 2(k - 1)/k N for MPICH's, 2(P - 1)/P N for ddp's ring, whatever the ranks per
  node; on one node the network stands in for shared memory, 2(P - 1)/P N / B);
- h, the measured hidden share of this algorithm; U its measured update (the median step's),
  and for eager-SGD the weights' averaging after each synchronous round, A(P) of the
  model's bytes once in ``sync_every`` steps;
- O(P) = e q (r - 1)^+ ceil(log2 P), what a host with r ranks per hardware thread adds
  (``perf_model.oversubscription``): r on the fit's own host, or on ``--site``'s hosts; e
  the collectives a step's ranks wait through together (``terms.crowding_exposure``: 1 for
  a synchronous step, less for eager-SGD's rounds, which fire before every rank waits); O
  is 0 where every rank has a hardware thread of its own.

Throughput is P b / T(P); efficiency (C + U) / T(P), against a rank alone that neither
waits nor communicates. The band is the spread of T(P) over the fit's bootstrap replicates
(``perf_model.bootstrap``): each refits every term and every measured part (h, U, m, N, q)
on the study's runs drawn whole with replacement. It is the spread that the runs measured
give the fit; a form that is wrong at scale lies outside it, and how often held-out runs
land inside it is measured in ``benchmarks/validate_model.py``, not assumed.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from workloads.allreduce_traffic import RABENSEIFNER, RING
from workloads.catch_up import catch_up

from .eager_rounds import EagerSteps, eager_steps
from .machine import Host, Network
from .terms import (allreduce_messages, compute_seconds, crowding_exposure, injected_wait_eager,
                    injected_wait_sample, injected_wait_sync, oversubscription_seconds)

SYNCHRONOUS = ("sync", "ddp", "horovod")
# whose allreduce an algorithm's runs take across nodes (``workloads.allreduce_traffic``): ddp's
# torch.distributed runs a ring (gloo on CPU, NCCL on GPU); the engine's MPI_Iallreduce (sync,
# eager-SGD) and Horovod's MPI ops run MPICH's reduce-scatter + allgather. (Horovod on GPUs and the
# engine's torch_distributed data path run NCCL's ring; the fit does not record the data path.)
TRAFFIC = {"ddp": RING}
EAGER = ("eager_solo", "eager_majority")
DEFAULT_BAND = 0.9


class PredictError(ValueError):
    """The fit cannot predict what was asked; the message says what is missing."""


# When a fit is too weak for its predictions to be read as numbers (``fit_doubts``): ``plan`` and
# ``model predict`` say so in a loud line before and after what they print.
# - Fewer than MIN_SIZES rank counts: the size-dependent terms have two parameters each (the
#   allreduce's latency and bandwidth; compute and the straggler's spread behind the slowest of P),
#   so at two sizes they pass through both and nothing is left to check their form against: the
#   extrapolation to other sizes is the form's, not the data's.
# - A term's worst relative error on the points it was fitted to above MAX_TERM_ERROR: the term
#   misses some of its own data by more than half, so what it adds at other sizes is no better.
MIN_SIZES = 3
MAX_TERM_ERROR = 0.5


def fit_doubts(fit: dict[str, Any], algorithm: str) -> list[str]:
    """Why ``fit``'s predictions for ``algorithm`` are not to be read as numbers (empty: none
    of the reasons above)."""
    out = []
    ranks = sorted(int(r) for r in (fit["workloads"][algorithm].get("ranks") or []))
    if len(ranks) < MIN_SIZES:
        out.append(f"its {algorithm} runs have {len(ranks)} size(s) ({', '.join(map(str, ranks)) or 'none'} ranks), "
                   f"fewer than {MIN_SIZES}: two parameters per size-dependent term pass through two sizes exactly, "
                   "so no run checks how they extrapolate")
    for name, term in fit["terms"].items():
        quality = term.get("quality") or {}
        worst = quality.get("max_relative") or 0.0
        if quality.get("points") and worst > MAX_TERM_ERROR:
            out.append(f"its {name} term misses its own points by up to {worst:.0%} (more than "
                       f"{MAX_TERM_ERROR:.0%})")
    return out


def band_unknown(fit: dict[str, Any], algorithm: str) -> str | None:
    """Why the fit's band cannot be read (``banded``'s words), or None where it can: with fewer
    than ``MIN_SIZES`` sizes every resample passes its size-dependent terms through the same two
    sizes (a spread that says nothing of the extrapolation), and without refits there is none."""
    runs = len(fit.get("run_ids") or [])
    ranks = {int(r) for r in (fit["workloads"][algorithm].get("ranks") or [])}
    said = f"{runs} run{'s' if runs != 1 else ''}"
    if len(ranks) < MIN_SIZES:
        return f"{said} at {len(ranks)} size{'s' if len(ranks) != 1 else ''}"
    if not fit.get("bootstrap"):
        return f"{said}, no refits"
    return None


def band_digits(low: float, high: float) -> int:
    """Decimal places a value with this band supports: the band's width to two significant digits
    (negative: round to tens, hundreds, ...)."""
    width = high - low
    if not (math.isfinite(width) and width > 0):
        return 0
    return 1 - math.floor(math.log10(width))


def two_significant(value: float) -> tuple[float, int]:
    """``value`` rounded to 2 significant digits, and the decimal places to print (12802 -> 13000, 0)."""
    digits = 1 - math.floor(math.log10(abs(value))) if value else 0
    return round(value, digits), max(digits, 0)


def banded(value: float, low: float | None, high: float | None, scale: float = 1.0, unit: str = "",
           runs: int | str | None = None) -> str:
    """``0.82 (0.61–0.95)``: a predicted value with its band, rounded to what the band supports.
    Without a band, or with one of no width (a bootstrap of 2 whole runs gives the same data back
    every time: a band it cannot have), never more than 2 significant digits, and the band said
    unknown: ``13000 (band unknown: 2 runs)`` (``runs``: the fit's count, or ``band_unknown``'s
    words), ``(no band)`` without either."""
    if value is None or not math.isfinite(value):
        return "-"
    v = value * scale
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        shown, places = two_significant(v)
        if isinstance(runs, str):
            why = f"band unknown: {runs}"
        else:
            why = f"band unknown: {runs} run{'s' if runs != 1 else ''}" if runs is not None else "no band"
        return f"{shown:.{places}f}{unit} ({why})"
    lo, hi = low * scale, high * scale
    digits = band_digits(lo, hi)
    places = max(digits, 0)
    show = lambda x: f"{round(x, digits):.{places}f}"  # noqa: E731
    return f"{show(v)}{unit} ({show(lo)}–{show(hi)})"


def majority_wait(sigma: float) -> float:
    """eager_majority: a round fires when its initiator (a rank drawn with a shared seed)
    arrives, so a rank that got there first waits for it: E[(X_init - X_self)^+] for two
    independent normal compute times of spread sigma, sigma E[max(0, sqrt(2) Z)] =
    sigma / sqrt(pi). Solo's rounds fire on the first arrival and wait for no one.

    The injected sleep is not added here: when the sleeper initiates, the others wait for
    it now instead of at the segment's synchronous round, where ``injected_wait_eager``
    already counts the sleeper's lag; counting it twice over-predicted the wait of the
    2-rank validation runs by ~80 ms."""
    return sigma / math.sqrt(math.pi)


def simulated_eager_steps(mode: str, ranks: int, compute: float, delay: float, delayed: int, sigma: float,
                          segment: int) -> EagerSteps:
    """``eager_rounds.eager_steps`` for catch-up, in units of ``compute`` and cached: the
    simulation scales with time, so delay and sigma are kept as shares of compute rounded to
    0.1 % of it (a bootstrap replicate's slightly other sigma reuses its neighbour's run)."""
    if compute <= 0:
        return eager_steps(mode, ranks, 0.0, delay, delayed, sigma, segment, catch_up=True)
    unit = _eager_steps_per_compute(mode, int(ranks), round(delay / compute, 3), int(delayed),
                                    round(sigma / compute, 3), int(segment))
    return EagerSteps(unit.seconds_per_gradient * compute, unit.rounds_per_gradient)


@functools.lru_cache(maxsize=4096)
def _eager_steps_per_compute(mode: str, ranks: int, delay: float, delayed: int, sigma: float,
                             segment: int) -> EagerSteps:
    return eager_steps(mode, ranks, 1.0, delay, delayed, sigma, segment, catch_up=True)


def choose_algorithm(fit: dict[str, Any], algorithm: str | None) -> str:
    shapes = fit.get("workloads")
    if not shapes:
        raise PredictError(f"model fit #{fit['id']} of study {fit['study']!r} predates predictions "
                           "(no workload shapes stored): run scalestudy model fit again")
    if algorithm is None:
        if len(shapes) > 1:
            raise PredictError(f"study {fit['study']!r} holds {', '.join(sorted(shapes))}: choose one with --algorithm")
        algorithm = next(iter(shapes))
    if algorithm not in shapes:
        raise PredictError(f"--algorithm {algorithm}: study {fit['study']!r} has no runs of it "
                           f"(it has {', '.join(sorted(shapes))})")
    if algorithm not in SYNCHRONOUS + EAGER:
        raise PredictError(f"--algorithm {algorithm}: not modelled (the model covers {', '.join(SYNCHRONOUS + EAGER)})")
    return algorithm


def term_params(terms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{term: params}`` from a fit's stored terms, with the straggler's measured distribution."""
    params: dict[str, Any] = {name: t["params"] for name, t in terms.items()}
    if terms.get("straggler", {}).get("distribution"):
        params["straggler_distribution"] = terms["straggler"]["distribution"]
    return params


def step_parts(params: dict[str, Any], shape: dict[str, Any], algorithm: str, ranks: int, nodes: int,
               network: Network | None, host: Host | None) -> dict[str, float]:
    """The predicted step's parts (s): compute, wait, comm (exposed), update, crowding, step."""
    c = float(compute_seconds(shape["batch_size"], shape["threads_per_worker"], **params["compute"]))
    sigma = params.get("straggler", {}).get("sigma", 0.0)
    k, d = shape["injected_ranks"], shape["injected_delay"]
    rounds_per_gradient = 1.0
    segment = shape["sync_every"] or shape["steps"] or 1   # eager-SGD: steps from one synchronous round to the next
    if ranks == 1:
        wait = d if k else 0.0
    elif algorithm in EAGER and catch_up(shape.get("catch_up")).predicted_by == "simulated":
        steps = simulated_eager_steps(algorithm.removeprefix("eager_"), ranks, c, d, k, sigma, segment)
        wait = max(steps.seconds_per_gradient - c, 0.0)
        if catch_up(shape["catch_up"]).counts_rounds:
            rounds_per_gradient = steps.rounds_per_gradient
    elif algorithm in EAGER:
        wait = injected_wait_eager(ranks, k, d, sigma, segment)
        if algorithm == "eager_majority":
            wait += majority_wait(sigma)
    else:
        wait = injected_wait_sync(ranks, k, d, sigma)
        sample = params.get("straggler_distribution")
        if sample:   # a skewed step time: the measured distribution's slowest of P, if later
            wait = max(wait, injected_wait_sample(ranks, k, d, sample))
    comm = averaging = 0.0
    if ranks > 1 and shape.get("gradient_bytes"):
        m, n = shape["collectives_per_step"], shape["gradient_bytes"]
        if network is not None:   # a site's: what a node's link carries for the algorithm's allreduce
            lat = network.latency
            moved = network.transfer_seconds(n, nodes, shape["workers_per_node"], TRAFFIC.get(algorithm, RABENSEIFNER))
        else:                     # fitted on this machine: per-rank bandwidth
            lat, bw = params["allreduce"]["latency"], params["allreduce"]["bandwidth"]
            moved = 2 * (ranks - 1) / ranks * n / bw
        comm = m * float(allreduce_messages(ranks)) * lat + moved
        if algorithm in EAGER:   # the weights' averaging after each synchronous round: as many bytes, not hidden
            averaging = (float(allreduce_messages(ranks)) * lat + moved) / segment
    exposed = (1 - shape["hidden"]) * comm
    update = shape["update_seconds"] * rounds_per_gradient + averaging
    crowd = params.get("oversubscription", {})
    q = crowd.get(f"q_{algorithm}", crowd.get("q", 0.0))   # one per algorithm (a counterfactual fit), or the host's
    # a fit stored before the exposure (no by_exposure) fitted q as if every step were synchronous
    exposure = crowding_exposure(algorithm, ranks, segment) if crowd.get("by_exposure") else 1.0
    crowding = float(oversubscription_seconds(ranks, host.ranks_per_core(nodes, shape["workers_per_node"]), q)
                     * exposure) if host is not None and q and ranks > 1 else 0.0
    return {"compute": c, "wait": wait, "comm": exposed, "update": update, "crowding": crowding,
            "step": c + wait + exposed + update + crowding}


# What a replicate re-measures of an algorithm's shape; the rest (batch, threads, layout,
# injection, sync_every) is the configuration asked about, the same in every replicate.
MEASURED_SHAPE = ("gradient_bytes", "collectives_per_step", "hidden", "update_seconds", "overhead_seconds")


def _replica_shape(replica: dict[str, Any], algorithm: str, shape: dict[str, Any]) -> dict[str, Any]:
    """``shape`` with a replicate's own measured parts (a replicate refits them too); a fit
    stored before replicates did so has none: the fit's."""
    own = (replica.get("workloads") or {}).get(algorithm)
    if not own:
        return shape
    return {**shape, **{k: own[k] for k in MEASURED_SHAPE if own.get(k) is not None}}


def predict(fit: dict[str, Any], algorithm: str, nodes: Sequence[int], workers_per_node: int | None = None,
            network: Network | None = None, band: float = DEFAULT_BAND, host: Host | None = None) -> pd.DataFrame:
    """One row per node count: nodes, ranks, the step's parts (s), step_seconds with its band
    (step_low, step_high), throughput (samples/s) with its band, efficiency with its band
    (efficiency_low, efficiency_high: each replicate's own). ``host``: the target site's hosts
    (ranks per core); without it, the host the fit was made on."""
    shape = dict(fit["workloads"][algorithm])
    wpn = int(workers_per_node or shape["workers_per_node"])
    shape["workers_per_node"] = wpn
    terms = term_params(fit["terms"])
    if host is None:
        host = Host.from_params(terms.get("oversubscription", {}))
    if "compute" not in terms:
        why = fit["unfitted"].get("compute")
        raise PredictError(f"model fit #{fit['id']}: no compute term" + (f" ({why})" if why else ""))
    if network is None and "allreduce" not in terms and any(n * wpn > 1 for n in nodes) and shape.get("gradient_bytes"):
        raise PredictError(f"model fit #{fit['id']} has no allreduce term ({fit['unfitted'].get('allreduce', '')}): "
                           "give --site SITE whose site YAML has a network: block")
    replicas = [({**terms, **r}, _replica_shape(r, algorithm, shape)) for r in (fit.get("bootstrap") or [])]
    lo_q, hi_q = (1 - band) / 2, 1 - (1 - band) / 2
    rows = []
    for n in nodes:
        p = int(n) * wpn
        point = step_parts(terms, shape, algorithm, p, int(n), network, host)
        parts = [step_parts(r, s, algorithm, p, int(n), network, host) for r, s in replicas]
        spread = [q["step"] for q in parts]
        low, high = (float(np.quantile(spread, lo_q)), float(np.quantile(spread, hi_q))) if spread else \
            (point["step"], point["step"])
        efficiency = (point["compute"] + point["update"]) / point["step"]
        shares = [(q["compute"] + q["update"]) / q["step"] for q in parts]
        e_low, e_high = (float(np.quantile(shares, lo_q)), float(np.quantile(shares, hi_q))) if shares else \
            (efficiency, efficiency)
        samples = p * shape["batch_size"]
        rows.append({"nodes": int(n), "ranks": p, **{f"{k}_seconds": v for k, v in point.items()},
                     "step_low": min(low, point["step"]), "step_high": max(high, point["step"]),
                     "throughput": samples / point["step"], "throughput_low": samples / max(high, point["step"]),
                     "throughput_high": samples / min(low, point["step"]),
                     "efficiency": efficiency, "efficiency_low": min(e_low, efficiency),
                     "efficiency_high": max(e_high, efficiency)})
    return pd.DataFrame(rows)
