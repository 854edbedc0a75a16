"""A site's network as measured (``study=network``, ``workloads/netbench.py``) beside its site
file's nominal numbers, and what each study's runs achieved through it.

- ``measurements``: every done run on the site that reported netbench's per-size metrics, one row
  per (run, size), with when it ran: stored per site and date as any run is.
- ``fit_network``: the per-message latency and the per-node bandwidth B of the performance
  model's allreduce term, t = 2 ceil(log2 P) lat + L / B, where L is what one node's link carries
  in each direction for the allreduce the measured backend runs
  (``workloads.allreduce_traffic.node_link_bytes``: 2(P-1)/P x S for NCCL's and gloo's ring,
  2(N-1)/N x S for MPICH's, both whatever the ranks per node w; sources there), fitted to the
  multi-node measurements by least squares on relative residuals (one node measures shared
  memory, not the network). ``model predict --network measured`` predicts with it.
- ``achieved``: per run with a timeline, the median bus bandwidth (nccl-tests' definition, S/t x
  2(n-1)/n) of its fused allreduces of 1 MiB or more (latency-bound small ones would say nothing
  of the link), timed from the last rank's start to the last rank's recorded end. That end is when
  the engine's cycle saw the collective complete and averaged it (``workloads/comm/background.py``
  ``_finish``: a test each cycle, up to a cycle late), not when it completed: the time is an upper
  bound and the bandwidth a LOWER bound (at least; up to the ranks' clock-offset error), not
  netbench's measure. A nonblocking MPI collective also progresses only when tested (MPICH
  without its asynchronous progress thread), so no finer completion time exists to read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Engine

from workloads.allreduce_traffic import RABENSEIFNER, algorithm_of, bus_factor, node_link_bytes

from results_db.store import query

_METRIC = re.compile(r"^(busbw_gbps|time_us)_(\d+)b$")
LARGE = 1 << 20   # bytes: collectives at least this large say something of bandwidth


def measurements(engine: Engine, site: str, backend: str | None = None) -> pd.DataFrame:
    """One row per (run, message size) of the site's netbench runs (latest attempts, done), with
    the backend each measured (``params.backend``: mpi, nccl or gloo; only ``backend``'s if given):
    an MPI and an NCCL curve of one site are two networks' worth, never pooled."""
    runs = query.runs(engine, where=f"site={site}, status=done")
    rows = []
    for run in runs.to_dict("records"):
        metrics = run.get("metrics") if isinstance(run.get("metrics"), dict) else {}
        sizes: dict[int, dict[str, float]] = {}
        for key, value in metrics.items():
            found = _METRIC.match(key)
            if found and isinstance(value, (int, float)):
                sizes.setdefault(int(found.group(2)), {})[found.group(1)] = float(value)
        params = run.get("params") if isinstance(run.get("params"), dict) else {}
        used = str(params.get("backend", "mpi"))
        if backend is not None and used != backend:
            continue
        for size, values in sizes.items():
            if "time_us" in values:
                rows.append({"run_id": run["run_id"], "study": run["study"], "created_at": run.get("created_at"),
                             "backend": used,
                             "nodes": int(run["nodes"]), "workers_per_node": int(run["workers_per_node"]),
                             "world_size": int(run["nodes"]) * int(run["workers_per_node"]), "bytes": size,
                             "time_us": values["time_us"], "busbw_gbps": values.get("busbw_gbps", math.nan)})
    return pd.DataFrame(rows, columns=["run_id", "study", "created_at", "backend", "nodes", "workers_per_node",
                                       "world_size", "bytes", "time_us", "busbw_gbps"])


@dataclass(frozen=True)
class MeasuredNetwork:
    latency_us: float
    node_bandwidth_gbs: float     # B: bytes per second one node's link carries each way, / 1e9
    points: int
    run_ids: tuple[int, ...]
    rms_relative: float           # the fit's residuals, relative to the measured times
    measured: str                 # when: the runs' dates
    algorithm: str = RABENSEIFNER   # the traffic model fitted (allreduce_traffic.ALGORITHMS)

    def describe(self) -> str:
        return (f"latency {self.latency_us:.3g} us, bandwidth {self.node_bandwidth_gbs:.3g} GB/s per node (a node's "
                f"link carrying the {self.algorithm} allreduce's traffic), measured ({len(self.run_ids)} run(s) of "
                f"{self.measured}; {self.points} points, RMS residual {self.rms_relative:.0%})")


def fit_network(frame: pd.DataFrame) -> MeasuredNetwork | None:
    """The allreduce term's latency and node bandwidth from multi-node measurements of one backend
    (``mpi`` where the frame has no ``backend``), with the traffic its algorithm puts on a node's
    link (``allreduce_traffic.node_link_bytes``); None with fewer than two sizes across nodes
    (nothing to separate latency from bandwidth)."""
    if "backend" in frame and frame["backend"].nunique() > 1:
        raise ValueError(f"measurements of {', '.join(sorted(frame['backend'].unique()))} together: fit one backend")
    across = frame[frame["nodes"] > 1]
    if across.empty or across["bytes"].nunique() < 2:
        return None
    algorithm = algorithm_of(str(across["backend"].iloc[0]) if "backend" in across else "mpi")
    p = across["world_size"].to_numpy(dtype=float)
    steps = 2 * np.ceil(np.log2(p))
    volume = node_link_bytes(across["bytes"].to_numpy(dtype=float), across["nodes"].to_numpy(dtype=float),
                             across["workers_per_node"].to_numpy(dtype=float), algorithm)
    t = across["time_us"].to_numpy(dtype=float) * 1e-6
    design = np.column_stack([steps, volume]) / t[:, None]     # relative residuals: every size counts
    from scipy.optimize import nnls

    (lat, inverse_bw), _ = nnls(design, np.ones_like(t))
    if inverse_bw <= 0:
        return None
    predicted = steps * lat + volume * inverse_bw
    dates = sorted({str(d)[:10] for d in across["created_at"] if d is not None})
    return MeasuredNetwork(latency_us=float(lat * 1e6), node_bandwidth_gbs=float(1 / inverse_bw / 1e9), points=len(t),
                           run_ids=tuple(sorted({int(i) for i in across["run_id"]})),
                           rms_relative=float(np.sqrt(np.mean(((predicted - t) / t) ** 2))),
                           measured=" to ".join(dict.fromkeys([dates[0], dates[-1]])) if dates else "unknown dates",
                           algorithm=algorithm)


ACHIEVED_COLUMNS = ["run_id", "study", "nodes", "workers_per_node", "collectives", "busbw_at_least_gbps"]


def achieved(engine: Engine, site: str, study: str | None = None) -> pd.DataFrame:
    """Per run on the site with a timeline: a lower bound on the bus bandwidth of its fused
    allreduces of ``LARGE`` bytes or more (``busbw_at_least_gbps``, their median: each timed from
    the last rank's start to the last rank's recorded end, which the engine stamps when its cycle
    sees the collective complete, up to a cycle late), and how many there were."""
    where = [f"site={site}", "status=done", "timeline=true"]
    runs = query.runs(engine, study=study, where=", ".join(where))
    if runs.empty:
        return pd.DataFrame(columns=ACHIEVED_COLUMNS)
    rows = []
    for run in runs.to_dict("records"):   # a run at a time, the columns used: a site's timelines can be 10^7 events each
        own = query.events(engine, [run["run_id"]], phases=["allreduce"], columns=["step", "tensor", "t0", "t1", "bytes"])
        own = own[own["bytes"] >= LARGE]
        if own.empty:
            continue
        per = own.groupby(["step", "tensor"]).agg(start=("t0", "max"), end=("t1", "max"), size=("bytes", "max"))
        seconds = (per["end"] - per["start"]).to_numpy()
        ok = seconds > 0
        if not ok.any():
            continue
        ranks = int(run["nodes"]) * int(run["workers_per_node"])
        busbw = per["size"].to_numpy()[ok] / seconds[ok] * bus_factor(ranks) / 1e9
        rows.append({"run_id": run["run_id"], "study": run["study"], "nodes": int(run["nodes"]),
                     "workers_per_node": int(run["workers_per_node"]), "collectives": int(ok.sum()),
                     "busbw_at_least_gbps": float(np.median(busbw))})
    return pd.DataFrame(rows, columns=ACHIEVED_COLUMNS)
