"""``scalestudy plan``: the node counts and repeats a node-hour budget buys on a site, from
a study's model fit (the pricing and choosing is ``orchestrator.sweep.budget_plan``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from ..terminal.tables import duration_text
from .common import NoDatabase, OlderSchema, OneLineParser, add_db_option, fail, open_for_reading
from .model_cmd import fit_is_emulated, parse_counts, require_workers_per_node, unvalidated_on, weak_fit_line

SETTINGS = ("study", "site", "algorithm", "workers_per_node", "account")


def plan(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="scalestudy plan",
        description="Choose the node counts and repeats a node-hour budget buys on a site, from the study's "
                    "model fit (scalestudy model fit): each size's predicted run time, walltime request, queue and "
                    "charge; the predicted curve; and the sweep command to run (also written to --out).")
    parser.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                        help="study=S (required: the fitted study), site=SITE (default local), algorithm=A, "
                             "workers_per_node=W, account=NAME (on a site with a scheduler: the allocation the "
                             "suggested sweeps are charged to)")
    parser.add_argument("--budget", type=float, required=True, help="node-hours to spend, charged at most")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs per node count (default: the most, up to 5, that keep the widest range of node "
                             "counts in the budget)")
    parser.add_argument("--until", type=float, default=None, metavar="FRACTION",
                        help="repeats on demand (sweep repeats.until): each node count's repeats grow until its "
                             "interval is within ± this (0.03), from a first stage of --repeats (default 3) to at "
                             "most --most; priced at --most repeats, what the sweep may run")
    parser.add_argument("--most", type=int, default=10, help="with --until: repeats a node count may reach (default 10)")
    parser.add_argument("--nodes", default=None, help="candidate node counts (default 1,2,4,... up to the site's max)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: what the study's runs ran)")
    parser.add_argument("--out", default=None, help="file for the sweep overrides (default plan-STUDY-SITE.txt)")
    add_db_option(parser)
    args = parser.parse_args(argv)
    try:
        settings = _settings(args)
    except ValueError as exc:
        return fail(str(exc))
    return _plan(args, settings)


def _settings(args) -> dict[str, str]:
    """The KEY=VALUE settings and the numbers, checked; ``ValueError`` with the one line."""
    settings = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or key not in SETTINGS:
            raise ValueError(f"{item!r}: expected study=S, site=SITE, algorithm=A, workers_per_node=W or account=NAME")
        settings[key] = value
    if "study" not in settings:
        raise ValueError("study=S is required (the study whose model fit plans the runs)")
    if not args.budget > 0:
        raise ValueError(f"--budget {args.budget}: expected node-hours > 0")
    if args.repeats is not None and args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: expected >= 1")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps {args.steps}: expected >= 1")
    if args.until is not None:
        if not 0 < args.until < 1:
            raise ValueError(f"--until {args.until}: expected a fraction between 0 and 1 (0.03: ±3 %)")
        args.repeats = args.repeats or 3
        if args.repeats < 2:
            raise ValueError(f"--repeats {args.repeats}: repeats on demand need a first stage of at least 2")
        if args.most < args.repeats:
            raise ValueError(f"--most {args.most}: expected at least the first stage's {args.repeats} repeats")
    return settings


def _site_and_workers(settings: dict[str, str]):
    """The site the plan is for (its account checked: the suggested sweeps run as printed, not
    charged to the site file's placeholder) and the workers per node asked for, if any."""
    from ..site.config import load_site, with_overrides
    from ..sweep.admission import check_account

    site = load_site(settings.get("site", "local"))
    if "account" in settings:
        site = with_overrides(site, account=settings["account"])
    check_account(site)
    wpn = int(settings["workers_per_node"]) if "workers_per_node" in settings else None
    if wpn is not None and wpn < 1:
        raise ValueError
    return site, wpn


def _plan(args, settings: dict[str, str]) -> int:
    from perf_model.predict import PredictError, choose_algorithm, fit_doubts
    from results_db.store.model_fits import latest_model_fit

    from ..errors import ConfigError
    from ..sweep.budget_plan import choose_plan

    study = settings["study"]
    try:
        site, wpn = _site_and_workers(settings)
    except ValueError:
        return fail(f"workers_per_node={settings.get('workers_per_node')!r}: expected an integer >= 1")
    except ConfigError as exc:
        return fail(str(exc))
    try:
        engine = open_for_reading(args.db)
    except (NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    fit = latest_model_fit(engine, study)
    if fit is None:
        return fail(f"study {study!r} has no model fit: run scalestudy model fit --study {study}")
    try:
        algorithm = choose_algorithm(fit, settings.get("algorithm"))
        require_workers_per_node(fit, algorithm, wpn, "workers_per_node=W")
    except (PredictError, ValueError) as exc:
        return fail(str(exc))
    shape = fit["workloads"][algorithm]
    wpn = wpn or shape["workers_per_node"]
    steps = args.steps or shape["steps"]
    candidates = parse_counts("--nodes", args.nodes) if args.nodes else \
        [2 ** i for i in range(int(math.log2(site.max_nodes)) + 1)]
    try:
        # repeats on demand may run --most repeats of every size: the budget must hold them
        priced = args.most if args.until is not None else args.repeats
        result = choose_plan(fit, algorithm, site, args.budget, priced, candidates, wpn, steps)
    except PredictError as exc:
        return fail(f"{exc}" + ("" if site.network else f" (site {site.name} has no network: block)"))
    except ConfigError as exc:
        return fail(str(exc))
    where = f"network of site {site.name}" if site.network else "allreduce fitted on the study's machine"
    print(f"plan for study {study} on site {site.name}: {algorithm}, {shape['model']}, batch {shape['batch_size']}/rank, "
          f"{wpn} rank(s)/node, {steps} steps per run, {result.repeats} repeat(s); model fit #{fit['id']}; {where}")
    doubts = fit_doubts(fit, algorithm)
    if doubts:
        print(weak_fit_line(fit, doubts))
    unvalidated = unvalidated_on(engine, fit, site)
    if unvalidated:
        print(f"UNVALIDATED on site {site.name}: {unvalidated}")
    if args.until is not None:
        print(f"repeats on demand: priced at {args.most} repeat(s) a node count, the most the sweep may run "
              f"(±{100 * args.until:g} % from a first stage of {args.repeats}); it runs fewer where the first stage "
              "is steady enough")
    from perf_model.predict import band_unknown

    if not _print_sizes(args.budget, result, band_unknown(fit, algorithm) or len(fit["run_ids"])):
        return 2
    from ..sweep.prediction import fitted_on

    devices = {device for _, _, device in fitted_on(engine, fit["run_ids"])}
    lines = _sweep_lines(study, site, algorithm, shape, wpn, steps, result, devices.pop() if len(devices) == 1 else None,
                         (args.until, args.most, args.repeats) if args.until is not None else None)
    out = Path(args.out or f"plan-{study}-{site.name}.txt")
    try:
        out.write_text("\n".join(lines) + "\n")
    except OSError as exc:
        return fail(f"--out {out}: {exc.strerror or exc}")
    if fit_is_emulated(engine, fit["run_ids"]):
        print("note: the fit's runs emulated their compute; the sweep below computes for real (compute=real)")
    print(f"sweep to run (written to {out}; add --dry-run to see what it would submit first); its runs go to a "
          f"study of their own, {plan_study_name(study, site.name)}, not into {study}:")
    for line in lines:
        print(f"  {line}")
    if doubts:
        print(weak_fit_line(fit, doubts))
    return 0


def _print_sizes(budget: float, result, fitted_runs: int | str | None = None) -> bool:
    """Each size's price and verdict; False (with the error line) when the budget buys no run.
    Throughput and efficiency with the fit's band (``perf_model.predict.banded``: rounded to what
    the band supports), the run time and node-hours at the fit's point value."""
    from perf_model.predict import banded

    print(f"budget {budget:g} node-hours, planned against each batch job's charge at most (walltime x charged "
          "nodes) with no run retried: a run that outlasts its walltime is retried in another batch job "
          "(retries.node_lost), charged beyond this plan; `sweep --dry-run` of the lines below prints the bound "
          "with retries")
    print(f"{'nodes':>6} {'ranks':>6} {'run':>9} {'walltime':>9} {'queue':>18} {'node-h at most':>14} "
          f"{'expected':>9}  {'samples/s (band)':<24} {'efficiency (band)':<22} plan")
    unknown = isinstance(fitted_runs, str)   # the fit cannot have a band (``band_unknown``): none printed
    for s in result.sizes:
        verdict = "run" if s.chosen else (f"refused: {s.refused}" if s.refused else "over budget")
        run = duration_text(s.run_seconds).replace(" ", "")
        print(f"{s.nodes:6d} {s.ranks:6d} {run:>9} {s.walltime:>9} {s.queue or '-':>18} "
              f"{s.max_node_hours:14.2f} {hours_text(s.expected_node_hours) if not s.refused else '-':>9}  "
              f"{banded(s.throughput, *(None, None) if unknown else (s.throughput_band or (None, None)), runs=fitted_runs):<24} "
              f"{banded(s.efficiency, *(None, None) if unknown else (s.efficiency_band or (None, None)), 100, ' %', runs=fitted_runs):<22} {verdict}")
    if not result.chosen:
        cheapest = min((s for s in result.sizes if not s.refused), key=lambda s: s.max_node_hours, default=None)
        fail(f"a budget of {budget:g} node-hours buys no run"
             + (f": the cheapest, {cheapest.nodes} node(s) x {result.repeats} repeat(s), costs "
                f"{cheapest.max_node_hours:.2f} at most" if cheapest else ": no queue takes any size"))
        return False
    print(f"chosen: {', '.join(str(s.nodes) for s in result.chosen)} node(s) x {result.repeats} repeat(s): "
          f"{result.max_node_hours:.2f} node-hours at most, {hours_text(result.expected_node_hours)} expected "
          f"({budget - result.max_node_hours:.2f} of the budget left)")
    return True


def hours_text(hours: float) -> str:
    """Node-hours to 2 decimals, or to 2 significant digits below 0.01 (a short run's expected cost
    is not 0.00)."""
    from perf_model.predict import two_significant

    if not (hours == hours) or hours <= 0:
        return "-"
    if hours >= 0.01:
        return f"{hours:.2f}"
    shown, places = two_significant(hours)
    return f"{shown:.{places}f}"


def _sweep_lines(study: str, site, algorithm: str, shape, wpn: int, steps: int, result,
                 device: str | None = None, on_demand: tuple[float, int, int] | None = None) -> list[str]:
    """One ``scalestudy sweep`` command per queue and walltime: the runs as priced."""
    import shlex

    # a study of its own per site (its runs are not mixed into the fitted study's), built on the
    # fitted study's preset where it is one, with every axis that preset sweeps pinned: the runs as priced
    named = [f"study={study}"] if _study_config_exists(study) else []
    lines = []
    for queue, walltime, nodes in result.sweep_groups(site):
        # the runs as priced: the steps, and what the fitted runs did
        overrides = [*named, f"study_name={plan_study_name(study, site.name)}", f"site={site.name}",
                     f"algorithm={algorithm}",
                     f"model={shape['model']}", f"batch_size={shape['batch_size']}", f"workers_per_node={wpn}",
                     f"threads_per_node={wpn * shape['threads_per_worker']}", "epochs=1", f"steps_per_epoch={steps}",
                     f"sync_every={shape['sync_every']}", f"nodes={','.join(map(str, nodes))}"]
        if on_demand is None:
            overrides.append(f"repeat={','.join(map(str, range(result.repeats)))}")
        else:   # the first stage, then the rule
            until, most, first = on_demand
            overrides += [f"repeat={','.join(map(str, range(first)))}", f"repeats.until={until:g}", f"repeats.most={most}"]
        if shape.get("dataset"):
            overrides.insert(4, f"dataset={shape['dataset']}")
        if device:   # the device the fitted runs ran on: what was priced (a GPU site's default would differ)
            overrides.append(f"device={device}")
        if shape["injected_ranks"]:
            overrides += ["imbalance.kind=injected", f"imbalance.ranks={shape['injected_ranks']}",
                          f"imbalance.delay_ms={shape['injected_delay'] * 1e3:g}"]
        if site.scheduler.batch_jobs:
            overrides += [f"account={site.account}", f"walltime={walltime}"]
            if queue and queue != site.queue:
                overrides.append(f"queue={queue}")
        if named:
            overrides += _pinned_preset_axes(study, overrides, shape)
        lines.append("scalestudy sweep " + " ".join(shlex.quote(o) for o in overrides))
    return lines


def plan_study_name(study: str, site: str) -> str:
    """The study a plan's suggested sweeps record into: the fitted study's name and the site's."""
    return f"{study}_{site}"


def _pinned_preset_axes(study: str, overrides: list[str], shape) -> list[str]:
    """``KEY=VALUE`` for each axis the preset sweeps and the lines do not set (``study=PRESET``
    sweeps its grid): one value, so that the sweep runs the configuration priced, not the grid
    times it. The fitted runs' own value where the fit recorded it (eager-SGD's catch-up), else
    the grid's first."""
    import yaml

    from ..sweep.preset import override_key
    from .sweep_cmd import STUDIES_DIR

    raw = yaml.safe_load((STUDIES_DIR / f"{study}.yaml").read_text()) or {}
    grid = (((raw.get("hydra") or {}).get("sweeper") or {}).get("params") or {})
    given = {override_key(o) for o in overrides}
    known = {"eager_catch_up": shape.get("catch_up")}
    return [f"{key}={known.get(key) or str(values).split(',')[0].strip()}" for key, values in grid.items()
            if key not in given]


def _study_config_exists(study: str) -> bool:
    from .sweep_cmd import STUDIES_DIR

    return (STUDIES_DIR / f"{study}.yaml").is_file()
