"""Which MPI a site's runs use, and checks that it is the one the site declares.

``mpi: wheel`` sites (laptops, CI, ``local``/``local_slurm``) use the ``mpich`` wheel of
this environment. ``mpi: system`` sites use the machine's MPI: mpi4py's binary wheel
(>= 4) loads any MPICH-ABI ``libmpi.so.12`` it finds, and Cray MPICH is one, so on a Cray
the environment holds mpi4py without the ``mpich`` wheel and the site's ``modules`` put
Cray MPICH and the launcher (PALS ``mpiexec``, ``aprun``, ``srun``) in reach. Two things
would silently replace the machine's MPI, and both are checked here: the ``mpich`` wheel's
``libmpi`` (mpi4py prefers the one in its own environment's ``lib/``) and the wheel's
``mpiexec`` (a venv's activation puts its ``bin`` first on ``PATH``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from workloads.nccl_network import PLUGIN_ENV
from workloads.site_mpi import SITE_MPI_ENV, thread_multiple_hint

from ..errors import ConfigError
from ..site.config import SiteConfig
from ..site.launchers import launch_flags
from ..site.schedulers import JOB_ID_VARS

PROBE = Path(__file__).with_name("probe.py")


def env_bin_dir() -> str:
    """The environment's bin/ (mpiexec, process_worker_pool.py), even when it is not activated."""
    return str(Path(sys.executable).parent)


def wheel_libmpi(prefix: str | None = None) -> Path | None:
    """The ``mpich`` wheel's ``libmpi.so.12`` in this environment, which mpi4py loads before any other."""
    path = Path(prefix or sys.prefix) / "lib" / "libmpi.so.12"
    return path if path.exists() else None


def batch_environment(site: SiteConfig, env_bin: str | None = None) -> list[str]:
    """A batch job's set-up lines, in order: files private to the user, the site's modules and
    ``worker_init``, then what no module may override: this environment's ``bin`` first on
    ``PATH`` (the sweep's own Python; a facility module such as ALCF's ``conda`` puts its own
    first), the site's variables, its NCCL network settings, and scalestudy's own."""
    lines = ["umask 077"]   # run folders, logs and results readable by the user only (README)
    if site.login_shell:
        # the facility's examples start #!/bin/bash -l for the login profile (the module command);
        # Parsl's PBS template also says "#PBS -S /bin/bash", and PBS then runs the script with that
        # shell, as no login shell: read the profile ourselves where `module` is missing
        lines.append("type module >/dev/null 2>&1 || . /etc/profile")
    lines.extend(f"module load {shlex.quote(m)}" for m in site.modules)  # validated at load
    lines.extend(site.worker_init)  # validated at load: plain commands, $VAR at most
    lines.append(f"export PATH={shlex.quote(env_bin or env_bin_dir())}:\"$PATH\"")
    lines.extend(f"export {name}={shlex.quote(value)}" for name, value in site.env)  # names validated at load
    nccl = site.nccl_network
    if nccl is not None:
        lines.extend(f"export {name}={shlex.quote(value)}" for name, value in nccl.exports())
        if nccl.enabled and nccl.library_path:
            lines.append(f"export LD_LIBRARY_PATH={shlex.quote(':'.join(nccl.library_path))}"
                         "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
        lines.append(f"export {PLUGIN_ENV}={shlex.quote(nccl.plugin)}")   # declared, even when turned off
    if site.mpi == "system":
        lines.append(f"export {SITE_MPI_ENV}=system")
        if site.libmpi:
            lines.append(f"export MPI4PY_LIBMPI={shlex.quote(site.libmpi)}")
    return lines


def check_system_mpi(site: SiteConfig) -> None:
    """On the login node, before anything is submitted: an ``mpi: system`` site with the
    ``mpich`` wheel in this environment would run on the wheel's MPI, not the machine's."""
    if site.mpi != "system" or site.libmpi:
        return
    lib = wheel_libmpi()
    if lib is not None:
        raise ConfigError("site.mpi", "system", f"this environment has the mpich wheel ({lib}), which mpi4py "
                          "would load instead of the machine's MPI: `pip uninstall mpich` here, or pin the "
                          "machine's library with libmpi: in the site file")


def check_wheel_mpi(site: SiteConfig, timeout: float = 60) -> None:
    """On the login node, before anything is submitted: an ``mpi: wheel`` site needs an MPI that
    mpi4py loads in this environment. Installed without the ``mpich`` extra (a new user's first
    try), every run would fail with "libmpi.so: cannot open shared object file"; the sweep
    stops here instead, in one line. Free where the wheel's library is there (the usual case);
    otherwise the probe asks this environment which MPI mpi4py loads (a fraction of a second)."""
    if site.mpi != "wheel" or (wheel_libmpi() is not None and not os.environ.get("MPI4PY_LIBMPI")):
        return
    env = {**os.environ, **dict(site.env)}
    proc = subprocess.run([sys.executable, str(PROBE), site.mpi_launcher, env_bin_dir()], env=env,
                          capture_output=True, text=True, timeout=timeout)
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), None)
    found = json.loads(line) if line else {"mpi4py_error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    if "mpi4py_error" in found:
        raise ConfigError("site.mpi", "wheel", f"mpi4py cannot load an MPI library in this environment "
                          f"({found['mpi4py_error']}): install the mpich wheel (`pip install mpich`, or scalestudy's "
                          "[mpich] extra), point MPI4PY_LIBMPI at your MPI's libmpi.so.12, or on a machine with its "
                          "own MPI use a site with mpi: system")


def resolve_launcher(name: str, env: dict[str, str]) -> str:
    """The machine's launcher for an ``mpi: system`` run: found on ``PATH`` without this
    environment's ``bin``, so that a venv's ``mpiexec`` can never stand in for PALS's."""
    own = os.path.realpath(env_bin_dir())
    path = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) != own)
    found = shutil.which(name, path=path)
    if found is None:
        raise FileNotFoundError(f"the site uses the machine's MPI (mpi: system) but no {name} is on PATH outside "
                                f"{own} after its modules and worker_init: load the module that provides it")
    return found


@dataclass
class Finding:
    level: str      # ok | warn | error
    text: str


SETUP_FAILED = "scalestudy: the site's set-up command failed: "
SETUP_FAILED_EXIT = 97


def guarded(lines: list[str]) -> list[str]:
    """The set-up lines, each stopping the script where it fails and naming itself (a batch
    script goes on past a failed ``module load``, and the probe after it could still pass).
    A line with a fallback of its own (``type module || . /etc/profile``: a facility's profile
    may end on a false test) is left as it is."""
    return [line if "||" in line else
            f"{line} || {{ echo {shlex.quote(SETUP_FAILED + line)} >&2; exit {SETUP_FAILED_EXIT}; }}"
            for line in lines]


def setup_failure(returncode: int, stderr: str) -> str | None:
    """The failed set-up command and what it said before it, from a ``guarded`` script's end."""
    if returncode != SETUP_FAILED_EXIT:
        return None
    lines = stderr.strip().splitlines()
    marker = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(SETUP_FAILED)), None)
    if marker is None:
        return None
    command = lines[marker][len(SETUP_FAILED):]
    said = next((x.strip() for x in reversed(lines[:marker]) if x.strip()), "")
    return f"the site's set-up command `{command}` failed" + (f": {said}" if said else "")


def probe_site(site: SiteConfig, timeout: float = 120, env_bin: str | None = None) -> dict:
    """Run the probe in the environment the site's batch jobs would have (its set-up lines, in a
    login shell so that ``module`` exists), or in this one plus the site's variables (local); then
    the MPI thread level it grants (``thread_level``). ``env_bin``: the Python environment's
    ``bin/`` the jobs run (default: this one's)."""
    env_bin = env_bin or env_bin_dir()
    launcher = site.mpi_launcher
    probe_cmd = [os.path.join(env_bin, "python3"), str(PROBE)]
    if not site.scheduler.batch_jobs:
        env = {**os.environ, **dict(site.env)}
        env["PATH"] = f"{env_bin}{os.pathsep}{env.get('PATH', '')}"
        proc = subprocess.run([*probe_cmd, launcher, env_bin], env=env, capture_output=True, text=True,
                              timeout=timeout)
    else:
        script = "\n".join([*guarded(batch_environment(site, env_bin)),
                            f"exec {shlex.join([*probe_cmd, launcher, env_bin])}"])
        proc = subprocess.run(["bash", "--login", "-c", script], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        failed = setup_failure(proc.returncode, proc.stderr)
        if failed:
            return {"setup_error": failed}
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"setup_error": f"the site's set-up failed (exit {proc.returncode}): {tail}"}
    found = json.loads(line)
    if "mpi4py_error" not in found:
        found.update(_thread_level(site, found, probe_cmd, env_bin, min(timeout, 60)))
    return found


def _thread_level(site: SiteConfig, p: dict, probe_cmd: list[str], env_bin: str, timeout: float) -> dict:
    """The thread level MPI_Init_thread(MULTIPLE) is granted: by one rank of the site's launcher
    inside an allocation (a batch job's id in this environment), else by MPI started alone here."""
    job = next((os.environ[v] for v in JOB_ID_VARS if os.environ.get(v)), None)
    launch, how = [], "MPI started alone on this node"
    where = p.get("launcher_outside_env") if site.mpi == "system" else p.get("launcher_on_path")
    if job and where:
        device = "cuda" if site.accelerators_per_node else "cpu"
        launch = [where, *site.launcher.one_rank()[1:], *site.launcher_options.split(),
                  *launch_flags(site, 1, 1, device).split()]
        how = f"one rank through {where} in job {job}"
    command = [*launch, *probe_cmd, "--thread-level"]
    try:
        if site.scheduler.batch_jobs:
            script = "\n".join([*batch_environment(site, env_bin), f"exec {shlex.join(command)}"])
            proc = subprocess.run(["bash", "--login", "-c", script], capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        else:
            env = {**os.environ, **dict(site.env), "PATH": f"{env_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
            proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"thread_level_error": f"MPI did not start within {timeout:.0f} s", "thread_level_how": how}
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"thread_level_error": f"exit {proc.returncode}: {tail}", "thread_level_how": how}
    return {**json.loads(line), "thread_level_how": how}


def _under(path: str, prefix: str) -> bool:
    return bool(path) and os.path.realpath(path).startswith(os.path.realpath(prefix) + os.sep)


def findings(site: SiteConfig, p: dict) -> list[Finding]:
    out: list[Finding] = []
    if "setup_error" in p:
        return [Finding("error", p["setup_error"])]
    major, minor = (int(x) for x in p["python"].split(".")[:2])
    out.append(Finding("ok" if (major, minor) >= (3, 10) else "error",
                       f"Python {p['python']} ({p['python_path']})" + ("" if (major, minor) >= (3, 10) else
                                                                       ": scalestudy needs 3.10 or newer")))
    if "mpi4py_error" in p:
        out.append(Finding("error", f"mpi4py does not load: {p['mpi4py_error']}"))
    env_bin = os.path.join(p["prefix"], "bin")
    if site.mpi == "system":
        if not p["launcher_outside_env"]:
            out.append(Finding("error", f"no {p['launcher']} on PATH outside the environment: add the module that "
                                        "provides it to modules:"))
        else:
            out.append(Finding("ok", f"runs start with {p['launcher_outside_env']} (the machine's)"))
        if _under(p["launcher_on_path"], env_bin) or _under(p["launcher_on_path"], env_bin_dir()):
            out.append(Finding("warn", f"{p['launcher_on_path']} comes first on PATH; scalestudy skips it, but your "
                                       "own scripts would not: `pip uninstall mpich`"))
        if p.get("libmpi") and _under(p["libmpi"], p["prefix"]):
            out.append(Finding("error", f"mpi4py loads {p['libmpi']}, the mpich wheel's, not the machine's MPI: "
                                        "`pip uninstall mpich` (or pin libmpi: in the site file)"))
        elif p.get("libmpi"):
            out.append(Finding("ok", f"mpi4py loads {p['libmpi']} ({p.get('mpi_library', '?')})"))
        if p.get("mpich_wheel") and not site.libmpi:
            out.append(Finding("warn", f"the mpich wheel {p['mpich_wheel']} is installed; on this site it is not "
                                       "used: `pip uninstall mpich`"))
    else:
        where = p["launcher_on_path"]
        if not where:
            out.append(Finding("error", f"no {p['launcher']} on PATH"))
        else:
            out.append(Finding("ok", f"runs start with {where}"))
        if p.get("libmpi"):
            own = _under(p["libmpi"], p["prefix"])
            out.append(Finding("ok" if own else "warn", f"mpi4py loads {p['libmpi']} ({p.get('mpi_library', '?')})"
                               + ("" if own else ": not this environment's mpich wheel, as mpi: wheel says")))
    out += _thread_findings(site, p) + _nccl_findings(site, p)
    return out


def _thread_findings(site: SiteConfig, p: dict) -> list[Finding]:
    if p.get("thread_level") == "MULTIPLE":
        return [Finding("ok", f"MPI grants MPI_THREAD_MULTIPLE ({p.get('thread_level_how')})")]
    if p.get("thread_level"):
        hint = thread_multiple_hint({SITE_MPI_ENV: site.mpi})
        return [Finding("error", f"MPI grants MPI_THREAD_{p['thread_level']} ({p.get('thread_level_how')}), and the "
                                 f"engine thread and eager-SGD's progress thread need MULTIPLE: {hint}")]
    if p.get("thread_level_error"):
        return [Finding("warn", f"the MPI thread level is not known: MPI did not start ({p.get('thread_level_how')}: "
                                f"{p['thread_level_error']}); run the check inside an allocation")]
    return []


def _nccl_findings(site: SiteConfig, p: dict) -> list[Finding]:
    nccl = site.nccl_network
    if nccl is None:
        return []
    if not nccl.enabled:
        return [Finding("warn", f"NCCL's {nccl.plugin} plugin is turned off (nccl_network.enabled: false): GPU runs "
                                "use NCCL's TCP sockets across nodes, and are flagged")]
    if p.get("nccl_plugins"):
        return [Finding("ok", f"NCCL network {nccl.plugin}: {', '.join(p['nccl_plugins'])} on LD_LIBRARY_PATH")]
    return [Finding("warn", f"NCCL_NET={nccl.plugin!r} forces NCCL's network plugin, and no libnccl-net*.so is on "
                            "LD_LIBRARY_PATH after the site's set-up: unless the library is found another way, NCCL "
                            "will refuse to start (set nccl_network.library_path)")]


def render_check(site: SiteConfig, p: dict, fs: list[Finding]) -> str:
    marks = {"ok": "ok   ", "warn": "WARN ", "error": "ERROR"}
    lines = [f"site {site.name}: {site.description}", f"  mpi: {site.mpi}   launcher: {site.mpi_launcher}"
             + (f"   modules: {' '.join(site.modules)}" if site.modules else "")]
    if "setup_error" not in p:
        lines += [f"  python:      {p['python']}  {p['python_path']}",
                  f"  mpi4py:      {p.get('mpi4py', 'not importable')}",
                  f"  libmpi:      {p.get('libmpi') or '-'}",
                  f"  MPI library: {p.get('mpi_library', '-')}",
                  f"  launcher:    {p['launcher_on_path'] or '-'} (first on PATH); "
                  f"{p['launcher_outside_env'] or '-'} (outside the environment)",
                  f"  threads:     {p.get('thread_level') or 'not known'} (MPI_Init_thread asked for MULTIPLE)"]
        if site.nccl_network is not None:
            lines.append(f"  NCCL plugin: {', '.join(p.get('nccl_plugins') or []) or '-'} (NCCL_NET "
                         f"{site.nccl_network.plugin!r}{'' if site.nccl_network.enabled else ', turned off'})")
    lines += [f"{marks[f.level]} {f.text}" for f in fs]
    return "\n".join(lines)
