"""``scalestudy network SITE``: the site's network as measured (``study=network``) beside its site
file's nominal numbers, and a lower bound on the bus bandwidth the site's runs achieved
(``results_db.analysis.network``)."""

from __future__ import annotations

import sys
from typing import Sequence

from .common import OneLineParser, add_db_option, fail


def network(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="scalestudy network",
        description="A site's network as measured by its study=network runs (allreduce time and bus bandwidth "
                    "over message sizes, workloads/netbench.py), the latency and bandwidth fitted to them beside "
                    "the site file's nominal numbers, and at least what its runs with a timeline achieved.")
    parser.add_argument("site", help="a site name (site_configs/) or a site YAML's path")
    parser.add_argument("--study", default=None, help="only this study's runs in the achieved table")
    add_db_option(parser)
    args = parser.parse_args(argv)

    from results_db.analysis import network as net

    from ..errors import ConfigError
    from ..site.config import load_site
    from ..terminal.output import render
    from .common import NoDatabase, OlderSchema, open_for_reading

    try:
        site = load_site(args.site)
        engine = open_for_reading(args.db)
    except (ConfigError, NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    measured = net.measurements(engine, site.name)
    if measured.empty:
        print(f"site {site.name}: no network measurements yet; measure inside its allocations with:\n"
              f"  scalestudy sweep study=network site={site.name} nodes=2,4" +
              (" account=PROJECT" if site.scheduler.batch_jobs else ""))
    else:
        curve = (measured.groupby(["backend", "nodes", "workers_per_node", "bytes"])["busbw_gbps"].median()
                 .unstack([0, 1, 2]))
        curve.columns = [f"{b} busbw GB/s, {n}x{w}" for b, n, w in curve.columns]
        render(curve.reset_index(), "table", title=f"site {site.name}: allreduce bus bandwidth (median of "
                                                   f"{measured['run_id'].nunique()} run(s)), nodes x ranks per node")
    backends = sorted(measured["backend"].unique()) if not measured.empty else []
    fits = {b: net.fit_network(measured[measured["backend"] == b]) for b in backends}
    for backend, fitted in fits.items():
        print(f"measured ({backend}): {fitted.describe()}" if fitted else
              f"measured ({backend}): nothing to fit (needs runs on 2 nodes or more at 2 sizes or more)")
    if site.network is not None:
        print(f"nominal (site file): {site.network.describe()}")
        for backend, fitted in fits.items():
            if fitted:
                print(f"measured ({backend}) / nominal: latency {fitted.latency_us / site.network.latency_us:.2f}x, "
                      f"bandwidth {fitted.node_bandwidth_gbs / site.network.node_bandwidth_gbs:.2f}x")
    else:
        print("nominal (site file): none (no network: block)")
    runs = net.achieved(engine, site.name, args.study)
    if runs.empty:
        print(f"achieved: no run with a timeline here has fused allreduces of {net.LARGE >> 20} MiB or more")
    else:
        render(runs, "table", title=f"achieved by runs with a timeline, at least: median busbw of fused allreduces "
                                    f"of {net.LARGE >> 20} MiB or more, each timed to when the engine's cycle saw it "
                                    f"complete (up to a cycle late), so a lower bound, not netbench's measure")
    print("(busbw = bytes / time x 2(n-1)/n, as nccl-tests defines it, per rank; the fitted bandwidth is per node: "
          "what one node's link carries for the backend's algorithm, see workloads/allreduce_traffic.py; "
          "model predict --network measured uses the measured numbers)", file=sys.stderr)
    return 0
