"""Fit every term of the model to a study (``scalestudy model fit``) and store the result.

A term the study's runs cannot determine is left out with its reason (say, one rank
count for the allreduce term), and the others are still fitted: a study of batch sizes
on one node still gives a compute model.
"""

from __future__ import annotations

from typing import Any, Callable

from sqlalchemy.engine import Engine

from results_db.model_fits import store_model_fit

from .bootstrap import DEFAULT_REPLICATES, bootstrap_params
from .fit import (FitError, Term, fit_allreduce, fit_compute_any, fit_hidden, fit_participation, fit_straggler,
                  is_constant_compute)
from .machine import Host
from .oversubscription import fit_for_study
from .predict import term_params
from .shape import workload_shapes
from .study import DEFAULT_WARMUP, StudyData, load_study


def fit_terms(data: StudyData) -> tuple[dict[str, Term], dict[str, str]]:
    fitters = {
        "compute": lambda: fit_compute_any(data.compute),
        "allreduce": lambda: fit_allreduce(data.allreduce),
        "straggler": lambda: fit_straggler(data.per_step),
        "overlap": lambda: fit_hidden(data.step_stats),
        "participation": lambda: fit_participation(data.rounds),
    }
    terms: dict[str, Term] = {}
    unfitted: dict[str, str] = {}
    for name, fit in fitters.items():
        try:
            terms[name] = fit()
        except FitError as exc:
            unfitted[name] = str(exc)
    return terms, unfitted


def fit_study(engine: Engine, study: str, warmup: int = DEFAULT_WARMUP,
              replicates: int = DEFAULT_REPLICATES,
              host_of: Callable[[str], Host | None] | None = None) -> dict[str, Any]:
    """Fit, store, and return ``{"id", "terms", "unfitted", "runs", "workloads", "replicates"}``.

    ``host_of`` (site name -> ``Host``) says how many cores a run's ranks shared; without it
    the oversubscription term is not fitted. It is fitted last, on what the other terms
    leave unexplained in each run's mean step."""
    data = load_study(engine, study, warmup)
    terms, unfitted = fit_terms(data)
    run_ids = [int(i) for i in data.runs["run_id"]]
    shapes = workload_shapes(data)
    if host_of is None:
        unfitted["oversubscription"] = "no site hosts given (cores per host unknown)"
    elif "compute" not in terms:
        unfitted["oversubscription"] = "needs the compute term (the other terms' prediction of a step)"
    else:
        try:
            as_dicts = {k: t.to_dict() for k, t in terms.items()}
            terms["oversubscription"] = fit_for_study(data, term_params(as_dicts), shapes, host_of,
                                                      is_constant_compute(as_dicts["compute"]))
        except FitError as exc:
            unfitted["oversubscription"] = str(exc)
    as_dicts = {k: t.to_dict() for k, t in terms.items()}
    replicas = bootstrap_params(data, set(terms), replicates) if replicates else []
    fit_id = store_model_fit(engine, study, as_dicts, unfitted, run_ids, warmup, shapes, replicas)
    emulated = int((data.runs.get("compute") == "emulated").sum()) if "compute" in data.runs else 0
    return {"id": fit_id, "terms": as_dicts, "unfitted": unfitted, "runs": len(run_ids), "emulated": emulated,
            "workloads": shapes, "replicates": len(replicas)}
