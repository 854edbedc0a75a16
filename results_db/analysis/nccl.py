"""GPU runs whose NCCL fell back to TCP sockets on a site that declares a network plugin.

Such a run looks normal and is about ten times slower across nodes (ALCF's measurements on
Polaris, ``site_configs/polaris.yaml``); ``scalestudy status`` and the report flag it. The
rule is the workload's (``workloads.nccl_network.used_sockets``); the columns are filled at
ingestion from the run's summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from workloads.nccl_network import SOCKET, used_sockets

from results_db.store.schema import Run, Study


@dataclass(frozen=True)
class SocketRuns:
    study: str
    plugin: str
    run_ids: tuple[int, ...]

    def describe(self) -> str:
        ids = ", ".join(str(i) for i in self.run_ids[:10]) + (" ..." if len(self.run_ids) > 10 else "")
        return (f"study {self.study}: {len(self.run_ids)} GPU run(s) used NCCL over TCP sockets although the site has "
                f"the {self.plugin} network plugin (runs {ids}): their communication is not the machine's; check the "
                "site's nccl_network and `scalestudy sites --check SITE`")


def socket_runs(engine: Engine, study: str | None = None) -> list[SocketRuns]:
    """Per study and plugin, the latest attempts that logged NCCL's socket network on a site with a plugin."""
    stmt = (select(Study.name, Run.id, Run.nccl_network, Run.nccl_plugin).join(Study, Run.study_id == Study.id)
            # one node: NCCL logs its network at start-up, but NVLink and shared memory carry the data
            .where(Run.latest.is_(True), Run.nodes > 1, Run.nccl_plugin.is_not(None),
                   Run.nccl_network.contains(SOCKET))
            .order_by(Study.name, Run.id))
    if study:
        stmt = stmt.where(Study.name == study)
    found: dict[tuple[str, str], list[int]] = {}
    with Session(engine) as session:
        for name, run_id, network, plugin in session.execute(stmt):
            if used_sockets(network, plugin):
                found.setdefault((name, plugin), []).append(run_id)
    return [SocketRuns(study, plugin, tuple(ids)) for (study, plugin), ids in found.items()]
