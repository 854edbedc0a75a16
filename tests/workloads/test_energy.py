"""Energy per run (workloads/energy.py): the counters' documented formats on recorded sysfs
trees (a Cray EX node's pm_counters, Linux RAPL with its wrap-around, a counter that goes
missing or restarts mid-run), NVML through a stand-in of its three calls (no GPU here), the
run's columns from its hosts' readings, and whole runs whose host reads a recorded
pm_counters tree while a thread advances it; Slurm's accounting through a scripted sacct (the
real one, on the local cluster, is tested in test_slurm.py)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import scalestudy
from workloads.energy import CounterLost, HostEnergy, Nvml, PmCounters, Rapl, SlurmStep, open_meter


def _pm_tree(root: Path, joules: int, generation: int = 7, startup: int = 1633001000000000) -> Path:
    """A Cray EX node's /sys/cray/pm_counters as HPE documents it: ``generation`` counts
    power-cap changes, ``startup`` changes when the pm_counters service restarts."""
    folder = root / "sys" / "cray" / "pm_counters"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "energy").write_text(f"{joules} J 1633005478452553 us\n")
    (folder / "power").write_text("312 W 1633005478452553 us\n")
    (folder / "generation").write_text(f"{generation}\n")
    (folder / "startup").write_text(f"{startup}\n")
    (folder / "freshness").write_text("4242\n")
    (folder / "version").write_text("2\n")
    return folder


def _rapl_tree(root: Path, values: dict[str, int], span: int = 1000, names: dict[str, str] | None = None) -> Path:
    """RAPL's powercap tree: ``intel-rapl:N`` is ``package-N`` unless ``names`` says otherwise
    (``psys``, the platform domain of client CPUs); ``intel-rapl:N:M`` a sub-domain."""
    base = root / "sys" / "class" / "powercap"
    for name, value in values.items():
        d = base / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "energy_uj").write_text(f"{value}\n")
        (d / "max_energy_range_uj").write_text(f"{span}\n")
        default = f"package-{name.split(':')[1]}" if name.count(":") == 1 else "dram"
        (d / "name").write_text(f"{(names or {}).get(name, default)}\n")
    return base


def test_pm_counters_interval_and_loss(tmp_path):
    folder = _pm_tree(tmp_path, 1000)
    host = HostEnergy(PmCounters(tmp_path), host="nid001")
    (folder / "energy").write_text("1250 J 1633005478552553 us\n")
    reading = host.stop()
    assert (reading.joules, reading.source, reading.kind, reading.host) == (250.0, "pm_counters", "measured", "nid001")
    # the counters restarted (startup changed): the interval is unknown, not negative or huge
    _pm_tree(tmp_path, 1000)
    host = HostEnergy(PmCounters(tmp_path))
    _pm_tree(tmp_path, 20, startup=1633005000000000)
    lost = host.stop()
    assert lost.joules is None and "restarted" in lost.note
    # the file goes missing mid-run
    _pm_tree(tmp_path, 1000)
    host = HostEnergy(PmCounters(tmp_path))
    (folder / "energy").unlink()
    gone = host.stop()
    assert gone.joules is None and "energy" in gone.note
    with pytest.raises(CounterLost, match="is not '<value> J"):
        (folder / "energy").write_text("garbage\n")
        PmCounters(tmp_path).sample()


def test_pm_counters_cap_change_is_measured_and_restart_is_seen(tmp_path):
    """``generation`` counts power-cap changes, which leave the energy counter running: a
    cap changed mid-run is still a measurement. A restart of the service (``startup``
    changed) resets the counters: the interval is lost even where the new value happens to
    be above the first (a restart early in a long run)."""
    _pm_tree(tmp_path, 1000, generation=7)
    host = HostEnergy(PmCounters(tmp_path))
    _pm_tree(tmp_path, 1400, generation=8)                   # the cap changed; same startup
    capped = host.stop()
    assert capped.joules == 400.0 and capped.note is None
    _pm_tree(tmp_path, 1000)
    host = HostEnergy(PmCounters(tmp_path))
    _pm_tree(tmp_path, 1600, startup=1633005000000000)      # restarted, then counted past 1000 J
    restarted = host.stop()
    assert restarted.joules is None
    assert restarted.note == "pm_counters restarted during the run (startup 1633001000000000 -> 1633005000000000)"


def test_rapl_packages_wrap_and_subdomains(tmp_path):
    """Two packages, a sub-domain (DRAM, part of package 0: not added), range 1000 µJ: package
    0 goes 900 -> 100 (one wrap: 200 µJ), package 1 10 -> 60 (50 µJ)."""
    base = _rapl_tree(tmp_path, {"intel-rapl:0": 900, "intel-rapl:1": 10, "intel-rapl:0:0": 5})
    meter = Rapl(tmp_path)
    assert meter.domains == 2
    host = HostEnergy(meter, wrap_sample_seconds=3600)
    (base / "intel-rapl:0" / "energy_uj").write_text("100\n")
    (base / "intel-rapl:1" / "energy_uj").write_text("60\n")
    (base / "intel-rapl:0:0" / "energy_uj").write_text("999\n")
    assert host.stop().joules == pytest.approx(250e-6)
    # two wraps between start and end are seen only if sampled between them: the sampler's job
    base = _rapl_tree(tmp_path / "b", {"intel-rapl:0": 100})
    meter = Rapl(tmp_path / "b")
    first = meter.sample()
    for value in (900, 300, 800, 200):          # 800 + 400 + 500 + 400 µJ, two wraps
        (base / "intel-rapl:0" / "energy_uj").write_text(f"{value}\n")
        last = meter.sample()
    assert meter.joules(first, last) == pytest.approx(2100e-6)


def test_rapl_psys_is_not_added_to_the_packages(tmp_path):
    """A client Intel CPU: ``intel-rapl:0`` is package-0 (with core and uncore inside it),
    ``intel-rapl:1`` is ``psys``, the whole platform, which holds the package's energy
    already: only the package is counted."""
    base = _rapl_tree(tmp_path, {"intel-rapl:0": 100, "intel-rapl:0:0": 10, "intel-rapl:0:1": 20, "intel-rapl:1": 500},
                      names={"intel-rapl:0:0": "core", "intel-rapl:0:1": "uncore", "intel-rapl:1": "psys"})
    meter = Rapl(tmp_path)
    assert meter.domains == 1
    host = HostEnergy(meter, wrap_sample_seconds=3600)
    (base / "intel-rapl:0" / "energy_uj").write_text("400\n")
    (base / "intel-rapl:1" / "energy_uj").write_text("900\n")
    assert host.stop().joules == pytest.approx(300e-6)
    # psys alone (no package domain) is no package energy: RAPL is not this host's source
    _rapl_tree(tmp_path / "psys", {"intel-rapl:0": 5}, names={"intel-rapl:0": "psys"})
    with pytest.raises(FileNotFoundError, match="package"):
        Rapl(tmp_path / "psys")


def _set_counter(path: Path, value: int) -> None:
    tmp = path.with_name("." + path.name)     # replaced whole: sysfs reads are never half-written
    tmp.write_text(f"{value}\n")
    tmp.replace(path)


def _sampled(meter: Rapl, value: int, timeout: float = 120.0) -> None:
    """Wait until the sampler thread has read ``value`` (never longer than ``timeout``, a
    generous ceiling that only a sampler that never reads it reaches)."""
    end = time.monotonic() + timeout
    while meter._last != [value]:
        assert time.monotonic() < end, f"the sampler never read {value}"
        time.sleep(0.01)


def test_rapl_sampler_thread_counts_wraps(tmp_path):
    base = _rapl_tree(tmp_path, {"intel-rapl:0": 0}, span=1000)
    meter = Rapl(tmp_path)
    host = HostEnergy(meter, wrap_sample_seconds=0.02)
    for value in (600, 100, 700, 200):          # each value read by the sampler: 600+500+600+500 µJ
        _set_counter(base / "intel-rapl:0" / "energy_uj", value)
        _sampled(meter, value)
    assert host.stop().joules == pytest.approx(2200e-6)


def test_counters_lost_mid_run_are_missing_not_zero(tmp_path, monkeypatch):
    """RAPL's file gone while the sampler runs; an NVML read that fails at the end; a counter
    that stood still (a VM's stub): each a missing reading with its reason."""
    base = _rapl_tree(tmp_path, {"intel-rapl:0": 0})
    meter = Rapl(tmp_path)
    host = HostEnergy(meter, wrap_sample_seconds=0.02)
    _set_counter(base / "intel-rapl:0" / "energy_uj", 300)
    _sampled(meter, 300)
    (base / "intel-rapl:0" / "energy_uj").unlink()
    reading = host.stop()
    assert reading.joules is None and "energy_uj" in reading.note

    nvml = _StandInNvml([[1000, 2000]])
    host = HostEnergy(Nvml(nvml, gpus="0,1"))
    nvml.energies = []                          # the driver stops answering
    reading = host.stop()
    assert reading.joules is None and reading.note.startswith("nvml:")

    import workloads.energy as energy
    monkeypatch.setattr(energy, "STILL_COUNTER_SECONDS", 0.0)
    _pm_tree(tmp_path / "still", 5000)
    reading = HostEnergy(PmCounters(tmp_path / "still")).stop()
    assert reading.joules is None and "did not advance" in reading.note


def test_source_choice(tmp_path, monkeypatch):
    monkeypatch.delenv("SCALESTUDY_ENERGY", raising=False)
    assert open_meter(root=str(tmp_path)).name == "none"              # nothing readable: missing, not 0
    _rapl_tree(tmp_path, {"intel-rapl:0": 5})
    assert open_meter(root=str(tmp_path)).name == "rapl"
    _pm_tree(tmp_path, 10)
    assert open_meter(root=str(tmp_path)).name == "pm_counters"       # the node's counter first
    assert open_meter("rapl", root=str(tmp_path)).name == "rapl"
    assert open_meter("none", root=str(tmp_path)) is None
    with pytest.raises(ValueError, match="SCALESTUDY_ENERGY='watts'"):
        open_meter("watts", root=str(tmp_path))


def test_a_host_without_any_counter_says_which_sources_it_tried(tmp_path, monkeypatch):
    """This machine: no pm_counters, no RAPL (an empty recorded tree stands for its /sys).
    The host's reading is missing with the sources tried and why each failed, and the run
    stores that as its energy_note; a host with a counter beside it is not summed alone."""
    from results_db.ingest.folder import _RunTotals

    monkeypatch.delenv("SCALESTUDY_ENERGY", raising=False)
    reading = HostEnergy(open_meter(root=str(tmp_path)), host="bare").stop()
    assert reading is not None and reading.joules is None and (reading.source, reading.kind) == ("none", None)
    tried = f"pm_counters: {tmp_path}/sys/cray/pm_counters/energy"
    assert reading.note.startswith("no energy counter readable (") and tried in reading.note
    assert f"rapl: {tmp_path}/sys/class/powercap" in reading.note
    cuda = HostEnergy(open_meter(root=str(tmp_path), device="cuda"), host="bare").stop()
    assert "nvml: " in cuda.note                                  # a GPU run tried NVML too

    def totals(readings, hosts):
        t = _RunTotals()
        for h in hosts:
            t.add_rank({"host": h, "node": h})
        for r in readings:
            t.add_end({"summary": {"energy": r}})
        return t.energy_of_run()

    alone = totals([reading.to_dict()], ["bare"])
    assert alone == {"energy_note": f"bare: {reading.note}"}       # no source, no kind: nothing was read
    rapl = {"host": "a", "source": "rapl", "joules": 300.0, "seconds": 10.0, "kind": "measured"}
    beside = totals([rapl, reading.to_dict()], ["a", "bare"])
    assert "energy_joules" not in beside and beside["energy_source"] == "rapl"
    assert beside["energy_note"].startswith("no energy counter on bare (1 of 2 hosts read): ")
    assert totals([], ["a"]) == {}                  # SCALESTUDY_ENERGY=none: no reading, and nothing to explain


class _StandInNvml:
    """The three NVML calls the reader makes, returning recorded values (no GPU here)."""

    def __init__(self, energies_mj: list[list[int]]) -> None:
        self.energies = energies_mj
        self.row = 0      # which recorded reading the next calls return

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.energies[0])

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return int(uuid.removeprefix("GPU-uuid-"))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self.energies[self.row][handle]


def test_nvml_sums_visible_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    nvml = _StandInNvml([[1000, 50, 2000, 7], [4000, 60, 2500, 8]])
    meter = Nvml(nvml)
    assert meter.domains == 2
    first = meter.sample()
    nvml.row = 1
    last = meter.sample()
    assert meter.joules(first, last) == pytest.approx((3000 + 500) / 1e3)   # GPUs 0 and 2 only
    nvml.row = 0
    with pytest.raises(CounterLost, match="went backwards"):
        meter.joules(last, meter.sample())
    # the host's ranks' GPUs, as the reader is told them (indices or UUIDs), each once
    assert Nvml(nvml, gpus="3,1,3").domains == 2 and Nvml(nvml, gpus="GPU-uuid-0,GPU-uuid-2").sample() == [1000, 2000]


def test_the_hosts_gpus_are_all_its_ranks_gpus():
    """What a host's reader counts: the GPUs of all its ranks, bound as each rank binds itself."""
    from workloads.placement import bind_gpu, host_gpus

    def bound(binding, listed, workers):
        gpus = []
        for local in range(workers):
            env = {"CUDA_VISIBLE_DEVICES": listed, "PMI_RANK": str(local)} if listed else {"PMI_RANK": str(local)}
            bind_gpu(binding, 4, workers, workers, env)
            gpus.append(env.get("CUDA_VISIBLE_DEVICES"))
        return ",".join(dict.fromkeys(gpus))

    assert host_gpus("reverse", 4, 4, {}) == bound("reverse", "", 4) == "3,2,1,0"      # Polaris
    assert host_gpus("direct", 4, 2, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == bound("direct", "4,5,6,7", 2) == "4,5"
    assert host_gpus("direct", 4, 2, {"CUDA_VISIBLE_DEVICES": "2"}) is None    # one GPU named: the user's own
    assert host_gpus("none", 4, 4, {}) is None


def test_run_columns_from_host_readings():
    from results_db.ingest.folder import _RunTotals

    def totals(readings, hosts):
        t = _RunTotals()
        for h in hosts:
            t.add_rank({"host": h, "node": h})
        for r in readings:
            t.add_end({"summary": {"energy": r}})
        return t.energy_of_run()

    a = {"host": "a", "source": "rapl", "joules": 300.0, "seconds": 10.0, "kind": "measured"}
    b = {"host": "b", "source": "rapl", "joules": 500.0, "seconds": 10.0, "kind": "measured"}
    both = totals([a, b, dict(a)], ["a", "b"])         # a's second rank read the same host: counted once
    assert both["energy_joules"] == 800.0 and both["energy_watts"] == pytest.approx(40.0)
    assert both["energy_kind"] == "measured" and both["energy_source"] == "rapl"
    half = totals([a], ["a", "b"])
    assert "energy_joules" not in half and "no energy counter on b" in half["energy_note"]
    mixed = totals([a, {**b, "source": "pm_counters"}], ["a", "b"])     # CPUs and a whole node: not one sum
    assert "energy_joules" not in mixed and "different sources" in mixed["energy_note"]
    lost = totals([a, {**b, "joules": None, "note": "pm_counters restarted"}], ["a", "b"])
    assert "energy_joules" not in lost and "restarted" in lost["energy_note"]
    assert totals([], ["a"]) == {}


@pytest.mark.skipif(not Path("/sys/class/powercap/intel-rapl:0/energy_uj").is_file(),
                    reason="this machine exposes no RAPL counter (/sys/class/powercap)")
def test_real_rapl_counts_up():
    host = HostEnergy(Rapl(Path("/")), wrap_sample_seconds=3600)
    sum(i * i for i in range(3_000_000))
    reading = host.stop()
    assert reading.joules is not None and reading.joules > 0


@pytest.mark.mpi
def test_runs_record_their_hosts_energy(tmp_path):
    """A built-in run and a command run on the local site, whose host reads a recorded
    pm_counters tree that a thread advances by 10 J every 20 ms: each run stores joules
    within what the thread added while it ran, one reading for its one host."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from results_db import connect
    from results_db.store import query
    from results_db.store.schema import RankSummary, Run

    folder = _pm_tree(tmp_path / "tree", 0)
    stop, value = threading.Event(), [0]

    def advance():
        while not stop.wait(0.02):
            value[0] += 10
            tmp = folder / ".energy"
            tmp.write_text(f"{value[0]} J 1633005478452553 us\n")
            tmp.replace(folder / "energy")

    thread = threading.Thread(target=advance, daemon=True)
    thread.start()
    env = {"SCALESTUDY_ENERGY_ROOT": str(tmp_path / "tree")}
    try:
        builtin = scalestudy("sweep", "site=local", "nodes=1", "workers_per_node=2", "epochs=1", "steps_per_epoch=3",
                             "study_name=energy", f"hydra.sweep.dir={tmp_path / 'a'}", cwd=tmp_path, env=env)
        command = scalestudy("sweep", "site=local", "nodes=1", "workers_per_node=2", "study_name=energy",
                             "workload.kind=command", "workload.command=[python,-c,'import time; time.sleep(1)']",
                             f"hydra.sweep.dir={tmp_path / 'b'}", cwd=tmp_path, env=env)
    finally:
        stop.set()
        thread.join()
    assert builtin.returncode == 0, builtin.stderr[-3000:]
    assert command.returncode == 0, command.stderr[-3000:]
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        runs = s.scalars(select(Run)).all()
        assert len(runs) == 2
        for run in runs:
            assert run.energy_source == "pm_counters" and run.energy_kind == "measured", run.energy_note
            # at least the second the command slept, at 500 W; at most all the thread added
            assert 0 < run.energy_joules <= value[0]
            assert 0 < run.energy_watts <= 550       # the thread's 500 W at most (it sleeps 20 ms a step, or more)
            readings = [r.summary["energy"] for r in s.scalars(select(RankSummary).where(RankSummary.run_id == run.id))
                        if isinstance(r.summary, dict) and "energy" in r.summary]
            assert len(readings) == 1          # one reader per host, not per rank
        slept = next(r for r in runs if r.workload_kind == "command")
        assert slept.energy_joules >= 0.5 * 500     # 10 J / 20 ms = 500 W for at least the 1 s sleep
    by_host = query.energy_by_host(engine, [r.id for r in runs])
    assert len(by_host) == 2 and set(by_host["source"]) == {"pm_counters"}     # one host per run
    for run in runs:   # the run's columns are its one host's reading
        row = by_host[by_host["run_id"] == run.id].iloc[0]
        assert row["joules"] == run.energy_joules and row["watts"] == pytest.approx(run.energy_watts)


@pytest.mark.mpi
def test_a_run_on_a_host_without_counters_stores_why(tmp_path):
    """A whole run whose host has no counter (an empty recorded tree: this machine's /sys has
    neither pm_counters nor RAPL): the run stores null joules and, as energy_note, the
    sources its host tried."""
    from results_db import connect
    from results_db.store import query

    bare = tmp_path / "bare"
    bare.mkdir()
    proc = scalestudy("sweep", "site=local", "nodes=1", "workers_per_node=1", "study_name=bare",
                      "workload.kind=command", "workload.command=[python,-c,'pass']",
                      f"hydra.sweep.dir={tmp_path / 'a'}", cwd=tmp_path,
                      env={"SCALESTUDY_ENERGY_ROOT": str(bare), "SCALESTUDY_ENERGY": "auto"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = query.runs(connect(f"sqlite:///{tmp_path / 'scalestudy.db'}"), study="bare").to_dict("records")
    assert run["energy_joules"] is None or run["energy_joules"] != run["energy_joules"]     # null (NaN in pandas)
    assert "no energy counter readable (pm_counters: " in run["energy_note"]
    assert f"rapl: {bare}/sys/class/powercap" in run["energy_note"]


def test_energy_figures_compare_and_report(tmp_path):
    """Runs at 1 and 2 nodes, 2 repeats each, with stored energy (and one 2-node run without):
    the figures' tables, compare's column and the report's column against the arithmetic."""
    import pandas as pd
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from perf_synthetic import write_study
    from results_db import connect
    from results_db.analysis import compare
    from results_db.report.figures import catalog
    from results_db.report.html_report import build_report
    from results_db.store.schema import Run

    url = f"sqlite:///{tmp_path / 'e.db'}"
    engine = connect(url)
    ids = write_study(engine, "en", configs=((8, 2), (8, 2), (8, 2), (8, 2), (8, 2)))
    # nodes 1, 1, 2, 2, 2 (the last without a counter); joules 100, 300 and 400, 600
    facts = [(1, 100.0), (1, 300.0), (2, 400.0), (2, 600.0), (2, None)]
    with Session(engine) as s, s.begin():
        for i, (run_id, (nodes, joules)) in enumerate(zip(ids, facts)):
            s.execute(update(Run).where(Run.id == run_id).values(
                nodes=nodes, world_size=2 * nodes, global_batch_size=16 * nodes, repeat=i, steps=10,
                energy_joules=joules, energy_kind="measured" if joules else None))
    out = tmp_path / "fig"
    results = catalog.render_study(engine, "en", out, only=["energy_vs_nodes", "samples_per_joule_vs_nodes"])
    assert [r.skipped for r in results] == [None, None], results
    energy = pd.read_csv(out / "energy_vs_nodes.csv").set_index("nodes")
    assert energy.loc[1, "value_mean"] == pytest.approx(0.2) and energy.loc[2, "value_mean"] == pytest.approx(0.5)
    assert list(energy["repeats"]) == [2, 2]                       # the run without a counter left out
    per_joule = pd.read_csv(out / "samples_per_joule_vs_nodes.csv").set_index("nodes")
    assert per_joule.loc[1, "value_mean"] == pytest.approx((160 / 100 + 160 / 300) / 2)
    assert per_joule.loc[2, "value_mean"] == pytest.approx((320 / 400 + 320 / 600) / 2)
    table = compare.compare(engine, "nodes=1", study="en")
    assert table.set_index("nodes").loc[2, "energy_kj_mean"] == pytest.approx(0.5)
    build_report(engine, "en", tmp_path / "report", url)
    page = (tmp_path / "report" / "index.html").read_text()
    assert "energy (kJ, measured)" in page and "samples per joule" in page


FAKE_SACCT = Path(__file__).parents[1] / "fake_scheduler" / "fake_sacct.py"


def _sacct_on_path(tmp_path: Path, monkeypatch, records) -> Path:
    """The scripted sacct first on PATH, answering from ``records`` (or as a cluster without
    accounting storage where ``records`` is "disabled")."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sacct").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_SACCT))} \"$@\"\n")
    (bin_dir / "sacct").chmod(0o755)
    db = tmp_path / "sacct.json"
    if records == "disabled":
        monkeypatch.setenv("FAKE_SACCT_DB", "disabled")
    else:
        db.write_text(json.dumps(records))
        monkeypatch.setenv("FAKE_SACCT_DB", str(db))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return db


def test_slurm_step_reading_names_its_step():
    with pytest.raises(FileNotFoundError, match="not inside a Slurm job step"):
        SlurmStep({"SLURM_JOB_ID": "42"})            # a batch script's own process: no step
    reading = HostEnergy(SlurmStep({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "3"}), host="n1").stop()
    assert reading.source == "slurm" and reading.slurm_step == "42.3" and reading.joules is None


def test_step_energy_from_the_sacct_stand_in(tmp_path, monkeypatch):
    from results_db.ingest.slurm_energy import step_energy

    db = _sacct_on_path(tmp_path, monkeypatch, {
        "42.0": {"ConsumedEnergyRaw": "54000", "ElapsedRaw": "30", "NNodes": "2"},
        "42.1": {"ConsumedEnergyRaw": "", "ElapsedRaw": "12", "NNodes": "1"},     # no energy plugin
        "43.0": {"ConsumedEnergyRaw": "900", "ElapsedRaw": "3", "NNodes": "1", "appears_after": 2},
    })
    found = step_energy("42.0", wait=0)
    assert (found.joules, found.seconds, found.nodes, found.note) == (54000.0, 30.0, 2, None)
    blank = step_energy("42.1", wait=0)
    assert blank.joules is None and "gathers none" in blank.note and "42.1" in blank.note
    late = step_energy("43.0", wait=0)           # written as the step ended: found on the third call
    assert late.joules == 900.0
    gone = step_energy("44.0", wait=0, tries=2)
    assert gone.joules is None and "no record of step 44.0" in gone.note
    assert step_energy("44.0; rm -rf /", wait=0).note.startswith("slurm_step '44.0; rm -rf /' is not JOB.STEP")
    argv = json.loads(Path(str(db) + ".calls").read_text().splitlines()[0])
    assert argv == ["-j", "42.0", "--noheader", "--parsable2", "--format=JobID,ConsumedEnergyRaw,ElapsedRaw,NNodes"]
    _sacct_on_path(tmp_path, monkeypatch, "disabled")
    assert step_energy("42.0", wait=0).note == "sacct: Slurm accounting storage is disabled"


def test_run_columns_from_slurm_accounting():
    from results_db.ingest.folder import _RunTotals
    from results_db.ingest.slurm_energy import StepEnergy

    t = _RunTotals()
    for h in ("n1", "n2"):
        t.add_rank({"host": h, "node": h})
        t.add_end({"summary": {"energy": {"host": h, "source": "slurm", "joules": None, "seconds": 29.0,
                                          "kind": "measured", "slurm_step": "42.0"}}})
    asked = []
    columns = t.energy_of_run(lambda step: asked.append(step) or StepEnergy(step, 54000.0, 30.0, 2))
    assert asked == ["42.0"]                    # once for the step, not once per host
    assert columns["energy_joules"] == 54000.0 and columns["energy_watts"] == pytest.approx(900.0)
    assert columns["energy_source"] == "slurm" and "energy_note" not in columns
    missing = t.energy_of_run(lambda step: StepEnergy(step, None, None, None, "sacct: Slurm accounting storage is disabled"))
    assert "energy_joules" not in missing and missing["energy_note"].endswith("storage is disabled")
