"""Fit every term of the model to a study (``scalestudy model fit``) and store the result.

A term the study's runs cannot determine is left out with its reason (say, one rank
count for the allreduce term), and the others are still fitted: a study of batch sizes
on one node still gives a compute model.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from results_db.store.model_fits import store_model_fit

from .bootstrap import DEFAULT_REPLICATES, bootstrap_fits
from .refit import HostOf, fit_all
from .study import DEFAULT_WARMUP, load_study



def fit_study(engine: Engine, study: str, warmup: int = DEFAULT_WARMUP,
              replicates: int = DEFAULT_REPLICATES, host_of: HostOf | None = None) -> dict[str, Any]:
    """Fit, store, and return ``{"id", "terms", "unfitted", "runs", "workloads", "replicates"}``.

    ``host_of`` (site name -> ``Host``) says how many cores a run's ranks shared; without it
    the oversubscription term is not fitted. ``replicates``: refits of every term on the
    study's runs drawn with replacement (``perf_model.bootstrap``), for the band."""
    data = load_study(engine, study, warmup)
    fitted = fit_all(data, host_of)
    run_ids = [int(i) for i in data.runs["run_id"]]
    boot = bootstrap_fits(data, host_of, replicates) if replicates else None
    replicas = boot.replicates if boot else []
    fit_id = store_model_fit(engine, study, fitted.terms, fitted.unfitted, run_ids, warmup, fitted.shapes, replicas)
    emulated = int((data.runs.get("compute") == "emulated").sum()) if "compute" in data.runs else 0
    return {"id": fit_id, "terms": fitted.terms, "unfitted": fitted.unfitted, "runs": len(run_ids),
            "emulated": emulated, "workloads": fitted.shapes, "replicates": len(replicas),
            "redrawn": boot.redrawn if boot else 0}
