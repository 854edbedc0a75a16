"""Every term of the model fitted on one set of runs: what ``model fit`` stores and what each
bootstrap replicate repeats on its draw of runs, so that the band moves with every fitted
and measured part, not only with three of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .fit import (FitError, Term, fit_allreduce, fit_compute_any, fit_hidden, fit_participation, fit_straggler,
                  is_constant_compute)
from .machine import Host
from .oversubscription import fit_for_study
from .predict import term_params
from .shape import workload_shapes
from .study import StudyData

HostOf = Callable[[str], "Host | None"]


@dataclass
class FittedTerms:
    terms: dict[str, dict[str, Any]]            # name -> Term.to_dict()
    unfitted: dict[str, str]                    # name -> why not
    shapes: dict[str, dict[str, Any]] = field(default_factory=dict)   # algorithm -> measured shape

    def as_params(self) -> dict[str, Any]:
        """``{term: params, ..., "workloads": shapes}``: one bootstrap replicate as stored."""
        return {**term_params(self.terms), "workloads": self.shapes}


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


def fit_all(data: StudyData, host_of: HostOf | None) -> FittedTerms:
    """The terms, the algorithms' shapes and, given ``host_of`` (site name -> ``Host``: how
    many cores a run's ranks shared), the oversubscription term, fitted last on what the
    others leave unexplained in each run's mean step."""
    terms, unfitted = fit_terms(data)
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
    return FittedTerms({k: t.to_dict() for k, t in terms.items()}, unfitted, shapes)
