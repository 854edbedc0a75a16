"""``scalestudy profile`` and ``scalestudy model fit|predict``: the performance model's
commands (the model itself is ``perf_model``; ``scalestudy plan`` is ``plan_cmd``)."""

from __future__ import annotations

from workloads.plural import counted

import statistics
from pathlib import Path
from typing import Sequence

from .common import NoDatabase, OlderSchema, OneLineParser, add_db_option, fail, open_for_reading


SHARES = ("overlap", "participation")   # terms whose residuals are fractions, not seconds


def parse_counts(field: str, text: str) -> list[int]:
    """``8,16,32``, or a geometric series written ``8,16,...,1024`` (the ratio of the first
    two, up to the last)."""
    parts = [p.strip() for p in text.replace("…", "...").split(",") if p.strip()]
    try:
        if "..." in parts:
            i = parts.index("...")
            head, last = [int(p) for p in parts[:i]], int(parts[i + 1])
            if len(head) < 2 or head[1] <= head[0] or i != len(parts) - 2:
                raise ValueError
            counts, ratio = head, head[1] / head[0]
            while counts[-1] * ratio <= last + 1e-9:
                counts.append(int(round(counts[-1] * ratio)))
        else:
            counts = [int(p) for p in parts]
    except (ValueError, IndexError):
        raise SystemExit(fail(f"{field} {text!r}: expected counts like 8,16,32 or 8,16,...,1024")) from None
    if not counts or any(c < 1 for c in counts):
        raise SystemExit(fail(f"{field} {text!r}: expected counts >= 1"))
    return sorted(set(counts))


def profile(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="scalestudy profile",
        description="Write the compute profile of a finished real run, for compute=emulated runs "
                    "(compute_profile=FILE). Profile a 1-rank run with timeline=true of the model, batch "
                    "and threads to emulate.")
    parser.add_argument("run_ids", type=int, nargs="+", metavar="RUN_ID",
                        help="run ids (scalestudy query shows them); several runs of one configuration are "
                             "pooled, a sample of the machine rather than of one run's minute")
    parser.add_argument("-o", "--out", default=None, help="profile file (default: profile-RUN_ID.json)")
    parser.add_argument("--warmup", type=int, default=None, help="steps to leave out at the start (default 5)")
    add_db_option(parser)
    args = parser.parse_args(argv)

    from perf_model.profile import DEFAULT_WARMUP, ProfileError, profile_of_runs

    try:
        engine = open_for_reading(args.db)
    except (NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    warmup = DEFAULT_WARMUP if args.warmup is None else args.warmup
    if warmup < 0:
        return fail(f"--warmup {warmup}: expected steps >= 0")
    try:
        prof = profile_of_runs(engine, args.run_ids, warmup)
    except ProfileError as exc:
        return fail(str(exc))
    out = Path(args.out or f"profile-{'-'.join(map(str, args.run_ids))}.json")
    out.write_text(prof.to_json())
    src = prof.source
    ms = lambda xs: f"{statistics.median(xs) * 1e3:.2f} ms (IQR {_iqr_ms(xs)})"  # noqa: E731
    print(f"{out}: {src['model']}, batch {src['batch_size']}, {src['threads_per_worker']} thread(s) per rank, "
          f"{len(prof.forward)} step records of {len(args.run_ids)} run(s) (up to {src['world_size']} rank(s), "
          f"first {warmup} steps of each left out)")
    print(f"  forward {ms(prof.forward)}, backward {ms(prof.backward)}")
    print(f"  gradient ready times: {len(prof.ready_fraction)} tensors from the timeline" if prof.ready_fraction
          else "  gradient ready times: none (run without timeline=true): emulated runs spread them evenly")
    if src["world_size"] > 1:
        print("  note: a multi-rank run's backward includes its engine's work; a 1-rank run's profile is cleaner")
    return 0


def _iqr_ms(xs: Sequence[float]) -> str:
    if len(xs) < 2:
        return "-"
    q = statistics.quantiles(xs, n=4)
    return f"{q[0] * 1e3:.2f}-{q[2] * 1e3:.2f}"


ACTIONS = {
    "fit": "fit the performance model to a study's runs (perf_model/terms.py holds its equations) and store it",
    "predict": "throughput, efficiency and the step's parts at other node counts, with the fit's uncertainty "
               "band, and a figure of measured points and the predicted curve",
    "export": "the study's measurements (what fit is fitted on) for another modeller: --format extrap writes "
              "Extra-P's JSON Lines input",
}


def _model_parser() -> OneLineParser:
    """One subcommand a action, each with its own options: ``model fit --help`` lists fit's."""
    parser = OneLineParser(prog="scalestudy model", description="; ".join(f"{a}: {w}" for a, w in ACTIONS.items()))
    actions = parser.add_subparsers(dest="action", required=True, metavar="{fit,predict,export}",
                                    parser_class=OneLineParser)
    sub = {a: actions.add_parser(a, help=w, description=w) for a, w in ACTIONS.items()}
    for p in sub.values():
        p.add_argument("--study", required=True)
        p.add_argument("--warmup", type=int, default=None, help="steps to leave out of each run (default 5)")
        add_db_option(p)
    sub["fit"].add_argument("--replicates", type=int, default=None,
                            help="bootstrap refits for the fit's band (default 100; 0: none)")
    pr = sub["predict"]
    pr.add_argument("--nodes", default=None, help="node counts, e.g. 8,16,...,1024 (default: 1,2,...,64)")
    pr.add_argument("--ranks", default=None, help="rank counts instead of nodes (one node each)")
    pr.add_argument("--workers-per-node", type=int, default=None, help="ranks per node (default: the study's)")
    pr.add_argument("--site", default=None, help="take the network from this site's network: block "
                                                 "(default: the allreduce fitted on the study's machine)")
    pr.add_argument("--network", choices=("nominal", "measured"), default="nominal",
                    help="with --site: the site file's network numbers (nominal), or those fitted to the site's "
                         "study=network runs (measured; scalestudy network SITE shows both)")
    pr.add_argument("--network-backend", choices=("mpi", "nccl", "gloo"), default="mpi",
                    help="with --network measured: whose measurement (params.backend of study=network)")
    pr.add_argument("--algorithm", default=None, help="which of the study's algorithms")
    pr.add_argument("--band", type=float, default=None, help="width of the band (default 0.9)")
    pr.add_argument("--out", default=None, help="folder for the figure and its CSV (default figures/STUDY)")
    pr.add_argument("--also", default=None, metavar="STUDY",
                    help="draw this study's runs too (runs the fit did not see: a check at scale)")
    ex = sub["export"]
    ex.add_argument("--out", default=None, help="the file (default STUDY-extrap.jsonl)")
    ex.add_argument("--format", default="extrap", choices=("extrap",),
                    help="the file's format (extrap: Extra-P's JSON Lines, extrap --json FILE)")
    return parser


# every option of any action, with its default: the actions' code reads them all
_DEFAULTS = {"replicates": None, "nodes": None, "ranks": None, "workers_per_node": None, "site": None,
             "network": "nominal", "network_backend": "mpi", "algorithm": None, "band": None, "out": None,
             "format": "extrap", "also": None}


def model(argv: Sequence[str]) -> int:
    args = _model_parser().parse_args(argv)
    for name, default in _DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    if args.action == "fit":
        return _fit(args)
    if args.action == "export":
        return _export(args)
    return _predict(args)


def _export(args) -> int:
    from perf_model.extrap_export import write_extrap
    from perf_model.study import DEFAULT_WARMUP

    warmup = DEFAULT_WARMUP if args.warmup is None else args.warmup
    if warmup < 0:
        return fail(f"--warmup {warmup}: expected steps >= 0")
    out = Path(args.out or f"{args.study}-extrap.jsonl")
    if not out.parent.is_dir():
        return fail(f"--out {out}: folder {out.parent} does not exist")
    try:
        engine = open_for_reading(args.db)
        runs = write_extrap(engine, args.study, out, warmup)
    except (NoDatabase, OlderSchema, ValueError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"--out {out}: {exc.strerror or exc}")
    print(f"{out}: {runs} run(s) of study {args.study} (first {warmup} steps left out), Extra-P JSON Lines: "
          f"open with `extrap --json {out}` or Extra-P's GUI")
    return 0


def _fit(args) -> int:
    from perf_model.bootstrap import DEFAULT_REPLICATES
    from perf_model.model import fit_study
    from perf_model.terms import param_text
    from perf_model.study import DEFAULT_WARMUP
    from results_db import connect
    from results_db.store.connect import resolve_db_url

    from ..site.model_inputs import host_of_site_name

    warmup = DEFAULT_WARMUP if args.warmup is None else args.warmup
    if warmup < 0:
        return fail(f"--warmup {warmup}: expected steps >= 0")
    replicates = DEFAULT_REPLICATES if args.replicates is None else args.replicates
    if replicates < 0:
        return fail(f"--replicates {replicates}: expected >= 0")
    try:
        fit = fit_study(connect(resolve_db_url(args.db)), args.study, warmup, replicates, host_of_site_name)
    except ValueError as exc:
        return fail(str(exc))
    print(f"study {args.study}: model fit #{fit['id']} from {fit['runs']} finished run(s)"
          + (f", {fit['emulated']} of them emulated" if fit["emulated"] else "")
          + f" (first {warmup} steps left out; {fit['replicates']} bootstrap refits on runs drawn whole"
          + (f", {fit['redrawn']} draws redrawn" if fit["redrawn"] else "") + ")")
    for name, term in fit["terms"].items():
        params = ", ".join(param_text(k, v) for k, v in term["params"].items())
        q = term["quality"]
        rms = f"{q['rms_seconds']:.3g}" if name in SHARES else f"{q['rms_seconds'] * 1e3:.3g} ms"
        quality = (f"{q['points']} points, residual RMS {rms}, worst {q['max_relative']:.1%}"
                   if q["points"] else "no points to check")
        print(f"  {name:13s} {params}  [{quality}]")
        for note in term["notes"]:
            print(f"  {'':13s} note: {note}")
    for name, why in fit["unfitted"].items():
        print(f"  {name:13s} not fitted: {why}")
    for algorithm, shape in fit["workloads"].items():
        grad = f"{shape['gradient_bytes'] / 1e6:.3g} MB" if shape["gradient_bytes"] else "unknown"
        print(f"  {algorithm}: ranks {','.join(map(str, shape['ranks']))}; per step {shape['collectives_per_step']:g} "
              f"collective(s) of {grad} in all, {shape['hidden']:.0%} hidden, update "
              f"{shape['update_seconds'] * 1e3:.3g} ms" + (f"; {shape['injected_ranks']} rank(s) sleep "
                                                           f"{shape['injected_delay'] * 1e3:g} ms each step"
                                                           if shape["injected_ranks"] else ""))
        for note in shape["notes"]:
            print(f"  {'':13s} note: {note}")
    from perf_model.predict import fit_doubts

    for algorithm in fit["workloads"]:
        doubts = fit_doubts(fit, algorithm) if fit["terms"] else []
        if doubts:
            print(f"{algorithm}: " + weak_fit_line({**fit, "study": args.study}, doubts))
    return 0 if fit["terms"] else 2


def _network(site_name: str | None, source: str = "nominal", engine=None, backend: str = "mpi"):
    from ..site.config import load_site
    from ..site.model_inputs import network_of

    if site_name is None:
        if source == "measured":
            raise ValueError("--network measured: give --site SITE (whose study=network runs were measured)")
        return None, None
    site = load_site(site_name)
    if source == "measured":
        from perf_model.machine import Network
        from results_db.analysis.network import fit_network, measurements

        fitted = fit_network(measurements(engine, site.name, backend))
        if fitted is None:
            raise ValueError(f"--network measured: site {site.name} has no {backend} network measurement across "
                             f"nodes: scalestudy sweep study=network site={site.name} nodes=2,4 params.backend={backend}")
        return site, Network(fitted.latency_us * 1e-6, fitted.node_bandwidth_gbs * 1e9,
                             f"measured on site {site.name} ({backend}): {fitted.describe()}")
    if site.network is None:
        raise ValueError(f"--site {site_name}: its site YAML has no network: block (latency_us, node_bandwidth_gbs, "
                         "source); see site_configs/template.yaml")
    return site, network_of(site)


def _predict(args) -> int:
    from perf_model.coverage import band_coverage
    from perf_model.predict import DEFAULT_BAND, PredictError, choose_algorithm, predict
    from results_db.store.model_fits import latest_model_fit

    from ..errors import ConfigError
    from ..site.model_inputs import host_of

    if args.nodes and args.ranks:
        return fail("--nodes and --ranks: give one")
    if args.network == "measured" and not args.site:
        return fail("--network measured: give --site SITE (whose study=network runs were measured)")
    band = DEFAULT_BAND if args.band is None else args.band
    if not 0 < band < 1:
        return fail(f"--band {band}: expected a fraction in (0, 1)")
    if args.workers_per_node is not None and args.workers_per_node < 1:
        return fail(f"--workers-per-node {args.workers_per_node}: expected >= 1")
    try:
        engine = open_for_reading(args.db)
    except (NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    fit = latest_model_fit(engine, args.study)
    if fit is None:
        return fail(f"study {args.study!r} has no model fit: run scalestudy model fit --study {args.study}")
    try:
        algorithm = choose_algorithm(fit, args.algorithm)
        site, network = _network(args.site, args.network, engine, args.network_backend)
        if args.ranks:
            counts, wpn = parse_counts("--ranks", args.ranks), 1   # one rank per node: P ranks on P nodes
            if args.workers_per_node:
                return fail("--ranks means one rank per node; give --nodes N,... with --workers-per-node instead")
        else:
            counts = parse_counts("--nodes", args.nodes or "1,2,...,64")
            wpn = args.workers_per_node
            require_workers_per_node(fit, algorithm, wpn, "--workers-per-node W")
        if site is not None and max(counts) > site.max_nodes and not args.ranks:
            print(f"note: site {site.name} has {site.max_nodes} nodes; counts above it are beyond the machine")
        table = predict(fit, algorithm, counts, wpn, network, band, host_of(site) if site is not None else None)
        coverage = band_coverage(engine, fit, args.study, algorithm, band)
    except (PredictError, ConfigError, ValueError) as exc:
        return fail(str(exc))
    shape = fit["workloads"][algorithm]
    unvalidated = unvalidated_on(engine, fit, site, network)
    _print_prediction(args.study, fit, algorithm, table, wpn or shape["workers_per_node"], site, network, band)
    if coverage is not None:
        print(coverage.line(algorithm))
    if unvalidated:
        print(f"UNVALIDATED on site {site.name}: {unvalidated}")
    _print_checked(engine, fit)
    return _draw(args, engine, fit, algorithm, table, site, band, unvalidated)


def _print_checked(engine, fit) -> None:
    """The predictions this fit made for sweeps since, and what their runs measured."""
    from results_db.store.runs import prediction_errors

    checked = prediction_errors(engine, fit["id"])
    if not checked:
        print(f"no run has checked a prediction of model fit #{fit['id']} yet (a sweep with steps_per_epoch on "
              "the fitted machine stores its runs' predicted times)")
        return
    print(f"predictions of model fit #{fit['id']} that runs have since met (run seconds, predicted vs measured):")
    for row in checked:
        print(f"  run {row['run_id']:>5} {row['algorithm']:>14} nodes {row['nodes']:>4} ranks {row['ranks']:>5}: "
              f"predicted {row['predicted_seconds']:.1f} s, measured {row['measured_seconds']:.1f} s, "
              f"error {row['error']:+.1%}")


def unvalidated_on(engine, fit, site, network=None) -> str:
    """Why a prediction for ``site`` has nothing of that site behind it ("" where it has: the
    fit's runs include real runs there)."""
    from ..sweep.prediction import fitted_on

    if site is None:
        return ""
    fitted = fitted_on(engine, fit["run_ids"])
    if any(s == site.name and c == "real" for s, c, _ in fitted):
        return ""
    shown = "; ".join(f"site {s}, compute={c}, device={d}" for s, c, d in sorted(fitted)) or "no runs"
    return (f"the fit has no real run there (it was fitted on {shown}); every number above combines that "
            f"machine's fitted terms with the site's network "
            f"({network.source if network is not None else site.network.describe()})")


def _print_prediction(study: str, fit, algorithm: str, table, wpn: int, site, network, band: float) -> None:
    from perf_model.predict import band_unknown, banded, fit_doubts

    shape = fit["workloads"][algorithm]
    where = f"network of site {site.name} ({network.source})" if network else \
        "allreduce fitted on the study's own machine"
    print(f"study {study}, {algorithm}: model fit #{fit['id']} ({counted(len(fit['run_ids']), 'run')}, "
          f"{len(fit.get('bootstrap') or [])} bootstrap refits); {shape['model']}, batch {shape['batch_size']}/rank, "
          f"{shape['threads_per_worker']} thread(s)/rank, {wpn} rank(s)/node; {where}")
    doubts = fit_doubts(fit, algorithm)
    if doubts:
        print(weak_fit_line(fit, doubts))
    banded_head = f"({band:.0%} band)"
    print(f"{'nodes':>6} {'ranks':>6}  {'step ms ' + banded_head:<24} {'samples/s ' + banded_head:<28} "
          f"{'efficiency ' + banded_head:<24} {'compute':>8} {'wait':>7} {'comm':>7} {'update':>7} {'crowd':>7}")
    unknown = band_unknown(fit, algorithm)   # a band the fit cannot have is not printed as one
    runs = unknown or len(fit["run_ids"])
    for r in table.itertuples():
        step, rate, eff = ((None, None),) * 3 if unknown else ((r.step_low, r.step_high), (r.throughput_low, r.throughput_high),
                                                                (r.efficiency_low, r.efficiency_high))
        print(f"{r.nodes:6d} {r.ranks:6d}  {banded(r.step_seconds, *step, 1e3, runs=runs):<24} "
              f"{banded(r.throughput, *rate, runs=runs):<28} "
              f"{banded(r.efficiency, *eff, 100, ' %', runs=runs):<24} "
              f"{r.compute_seconds * 1e3:8.1f} {r.wait_seconds * 1e3:7.1f} {r.comm_seconds * 1e3:7.2f} "
              f"{r.update_seconds * 1e3:7.2f} {r.crowding_seconds * 1e3:7.1f}")
    for name, term in fit["terms"].items():
        for note in term["notes"]:
            print(f"note ({name}): {note}")
    for note in shape["notes"]:
        print(f"note ({algorithm}): {note}")
    print("the band is the fit's spread over its own runs (runs resampled, every term refitted), not a "
          "prediction interval: it leaves out how far one new run lands and any error of the model's form at "
          "scale, so read it as the fit's uncertainty, not as a range a run will fall in; each number is rounded "
          "to what its band supports (the band's width to 2 significant digits); the step's parts (ms) are the "
          "fit's point values")
    if doubts:
        print(weak_fit_line(fit, doubts))


def weak_fit_line(fit, doubts: Sequence[str]) -> str:
    """The loud line of a fit too weak to read its predictions as numbers (``perf_model.predict.fit_doubts``)."""
    from perf_model.predict import MAX_TERM_ERROR, MIN_SIZES

    return (f"WEAK FIT: model fit #{fit['id']} of study {fit['study']}: {'; '.join(doubts)}. Read what follows as "
            f"an order of magnitude, not as numbers: fit again with runs at {MIN_SIZES} or more sizes whose terms "
            f"miss their points by less than {MAX_TERM_ERROR:.0%} (docs: the model and the planner)")


def _draw(args, engine, fit, algorithm: str, table, site, band: float, unvalidated: str = "") -> int:
    """The prediction's figure (measured points, the predicted curve and band) and its CSV."""
    from perf_model.figure import draw_prediction
    from perf_model.measured import measured_throughput

    shape = fit["workloads"][algorithm]
    measured = measured_throughput(engine, fit["run_ids"], fit["warmup"])
    measured = measured[measured["algorithm"] == algorithm]
    others = None
    if args.also:
        from results_db.store import query

        ids = [int(i) for i in query.runs(engine, study=args.also, where="status=done")["run_id"]]
        if not ids:
            return fail(f"--also {args.also}: no finished runs")
        others = measured_throughput(engine, ids, fit["warmup"])
        others = others[others["algorithm"] == algorithm]
    out = Path(args.out or Path("figures") / args.study)
    stem = f"prediction-{algorithm}" + (f"-{site.name}" if site else "")
    if site is not None:   # the CSV says it too: a table copied elsewhere keeps the warning
        table = table.assign(site=site.name, validated_on_site=not unvalidated)
    try:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / f"{stem}.csv", index=False)
    except OSError as exc:
        return fail(f"--out {out}: {exc.strerror or exc}")
    emulated = fit_is_emulated(engine, fit["run_ids"])
    path = draw_prediction(table, measured, out / f"{stem}.png",
                           f"{args.study}: {algorithm}, {shape['model']}, batch {shape['batch_size']}/rank"
                           + (f", network of {site.name}" if site else "")
                           + (f" (UNVALIDATED on {site.name}: no real run there)" if unvalidated else ""), band, emulated,
                           others=others, others_label=f"runs of {args.also} (not fitted)")
    print(f"figure: {path} (table: {out / f'{stem}.csv'})")
    return 0


def require_workers_per_node(fit, algorithm: str, wpn: int | None, how: str) -> None:
    seen = fit["workloads"][algorithm].get("workers_per_node_seen") or []
    if wpn is None and len(seen) > 1:
        raise ValueError(f"the study's {algorithm} runs had {', '.join(map(str, seen))} ranks per node: give {how}")


def fit_is_emulated(engine, run_ids) -> bool:
    from results_db.store import query

    runs = query.runs(engine, run_ids=list(run_ids))
    return bool("compute" in runs and (runs["compute"] == "emulated").any())
