"""The run spec: the single document a workload is started with.

The orchestrator builds and validates it from Hydra's config; the workload only
reads it. It is frozen and JSON-serialisable so that the same bytes describe the
run on the login node, in the batch job and in the results database.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

SPEC_SCHEMA = 1


@dataclass(frozen=True)
class RunSpec:
    study: str
    site: str
    nodes: int
    workers_per_node: int
    threads_per_node: int
    batch_size: int
    algorithm: str = "sync"
    model: str = "small_cnn"
    dataset: str = "digits"
    dataset_path: Optional[str] = None
    epochs: int = 1
    steps_per_epoch: Optional[int] = None
    lr: float = 0.1
    momentum: float = 0.9
    seed: int = 0
    fusion_threshold_mb: float = 64.0
    cycle_time_ms: float = 5.0
    timeline: bool = False
    device: str = "cpu"
    sync_every: int = 10
    imbalance_kind: str = "none"
    imbalance_ranks: int = 1
    imbalance_delay_ms: float = 0.0
    imbalance_rank: int = -1
    imbalance_sigma: float = 1.0
    schema: int = SPEC_SCHEMA

    @property
    def world_size(self) -> int:
        return self.nodes * self.workers_per_node

    @property
    def threads_per_worker(self) -> int:
        return self.threads_per_node // self.workers_per_node

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunSpec":
        schema = data.get("schema", SPEC_SCHEMA)
        if schema != SPEC_SCHEMA:
            raise ValueError(f"spec schema {schema!r} is not supported (this workload reads {SPEC_SCHEMA})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"spec has unknown fields: {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> "RunSpec":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")
