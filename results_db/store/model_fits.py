"""Storing and reading fitted performance models (``perf_model`` computes them)."""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from .connect import writer
from .runs import get_or_create_study
from .schema import ModelFit, Study


def store_model_fit(engine: Engine, study: str, terms: dict[str, Any], unfitted: dict[str, str],
                    run_ids: Sequence[int], warmup: int, workloads: dict[str, Any] | None = None,
                    bootstrap: list[dict[str, Any]] | None = None) -> int:
    with Session(writer(engine)) as session, session.begin():
        row = ModelFit(study_id=get_or_create_study(session, study).id, terms=terms, unfitted=unfitted,
                       run_ids=[int(i) for i in run_ids], warmup=int(warmup), workloads=workloads,
                       bootstrap=bootstrap)
        session.add(row)
        session.flush()
        return row.id


def latest_model_fit(engine: Engine, study: str) -> dict[str, Any] | None:
    """The newest fit of ``study`` as a plain dict, or None."""
    with Session(engine) as session:
        row = session.scalars(select(ModelFit).join(Study, ModelFit.study_id == Study.id)
                              .where(Study.name == study).order_by(ModelFit.id.desc()).limit(1)).one_or_none()
        if row is None:
            return None
        return {"id": row.id, "study": study, "created_at": row.created_at, "terms": row.terms,
                "unfitted": row.unfitted, "run_ids": list(row.run_ids), "warmup": row.warmup,
                "workloads": row.workloads, "bootstrap": row.bootstrap}
