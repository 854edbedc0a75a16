"""Parsl imported without typeguard's checks (``orchestrator.pools.unchecked_parsl``): what is
switched off, only there, and that every site's Parsl config still passes the checks.

Each case runs in a fresh interpreter: whether Parsl's modules are instrumented is decided
once, when they are first imported, and this test process may have imported them either way."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# A wrongly typed argument to a Parsl constructor that typeguard instruments: TypeCheckError
# when checked; unchecked, Config stores it without a word.
_PROBE = """
def probe():
    from parsl.config import Config
    try:
        Config(retries="three")
    except Exception as exc:
        return type(exc).__name__
    return "accepted"
"""


def _python(body: str, probe: bool = True) -> dict:
    program = (_PROBE if probe else "") + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])




def test_parsl_imported_inside_is_unchecked_and_typeguard_is_restored_after():
    out = _python("""
        import json, typeguard
        from orchestrator.pools.unchecked_parsl import typechecks_off
        before = typeguard.typechecked
        with typechecks_off():
            import parsl.config
        print(json.dumps({"probe": probe(), "restored": typeguard.typechecked is before}))
    """)
    assert out == {"probe": "accepted", "restored": True}


def test_parsl_imported_plainly_keeps_its_checks():
    """The control: the same call fails when Parsl was imported without ``typechecks_off``."""
    out = _python("""
        import json
        import parsl.config
        print(json.dumps({"probe": probe()}))
    """)
    assert out == {"probe": "TypeCheckError"}


def test_every_sites_parsl_config_passes_parsls_checks(tmp_path):
    """What the checks would have caught in scalestudy's own Parsl objects, they still catch
    here: each site file's executors and providers built with typeguard on."""
    sites = sorted(p.stem for p in (REPO / "site_configs").glob("*.yaml") if p.stem != "template")
    out = _python(f"""
        import json
        import parsl.config   # checked: imported before anything of scalestudy's
        from orchestrator.pools.parsl_config import build_parsl_config
        from orchestrator.site.config import load_site
        from orchestrator.site.queues import plan_batch_jobs
        built = {{}}
        for name in {sites!r}:
            site = load_site(name)
            if not site.scheduler.batch_jobs:
                continue
            config = build_parsl_config(site, __import__("pathlib").Path({str(tmp_path)!r}) / name,
                                        plan_batch_jobs(site, [1]))
            built[name] = [type(e.provider).__name__ for e in config.executors]
        print(json.dumps({{"probe": probe(), "built": built}}))
    """)
    assert out["probe"] == "TypeCheckError"      # the checks were on while the configs were built
    assert set(out["built"]) >= {"local_slurm", "polaris", "perlmutter", "theta"}, out["built"]
    assert all(out["built"].values())


def test_the_sweep_drivers_pool_and_the_batch_jobs_pool_import_parsl_unchecked(tmp_path):
    """The three processes on the way to a first run import Parsl through ``typechecks_off``:
    the driver's pool (``ParslRunPool``), the worker pool's fork server preload, and the
    interchange (its launcher runs Parsl's script in-process, within the context)."""
    source = {name: (REPO / "orchestrator" / "pools" / f"{name}.py").read_text()
              for name in ("parsl_pool", "worker_pool", "worker_pool_preload", "interchange")}
    for name, text in source.items():
        assert "typechecks_off()" in text, name
    out = _python("""
        import json, sys
        import orchestrator.pools.worker_pool_preload   # what the fork server imports
        from parsl.config import Config
        try:
            Config(retries="three")
            probe = "accepted"
        except Exception as exc:
            probe = type(exc).__name__
        print(json.dumps({"probe": probe,
                          "pool_module": "parsl.executors.high_throughput.process_worker_pool" in sys.modules}))
    """, probe=False)
    assert out == {"probe": "accepted", "pool_module": True}
