"""What MPI this Python environment would use: printed as one JSON line.

Run with any Python (``python probe.py LAUNCHER``), standard library only, so that
``scalestudy sites --check`` can ask the environment a batch job would have (after the
site's modules and ``worker_init``) even where scalestudy itself is not importable. MPI
is not initialised: ``MPI_Get_library_version`` may be called before ``MPI_Init``.

``python probe.py --thread-level`` (started by the site's launcher inside an allocation, or
alone) initialises MPI as a run does, asking for ``MPI_THREAD_MULTIPLE``, and prints the level
granted: Cray MPICH grants no more than ``MPICH_MAX_THREAD_SAFETY`` allows.
"""

import json
import os
import re
import shutil
import sys


def _loaded_libmpi() -> str:
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if re.search(r"/lib(mpi|mpich)(_[a-z0-9_]+)?\.so", path):
                    return os.path.realpath(path)
    except OSError:
        pass
    return ""


THREAD_LEVELS = ("SINGLE", "FUNNELED", "SERIALIZED", "MULTIPLE")


def nccl_plugins() -> list:
    """NCCL network plugins (``libnccl-net*.so``) in the folders of ``LD_LIBRARY_PATH``, where
    NCCL's ``dlopen`` finds a facility's plugin."""
    found = []
    for folder in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        try:
            found += [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.startswith("libnccl-net")
                      and ".so" in n]
        except OSError:
            continue
    return found


def thread_level() -> dict:
    try:
        import mpi4py
        mpi4py.rc.thread_level = "multiple"
        from mpi4py import MPI
        level = MPI.Query_thread()
        names = {getattr(MPI, f"THREAD_{n}"): n for n in THREAD_LEVELS}
        return {"thread_level": names.get(level, str(level))}
    except Exception as exc:  # noqa: BLE001 - reported: the check says MPI did not start here
        return {"thread_level_error": f"{exc.__class__.__name__}: {exc}".strip().splitlines()[0]}


def probe(launcher: str, exclude: list) -> dict:
    """``exclude``: more environment bin/ folders than this Python's (scalestudy's own, whose
    bin/ a batch job puts on PATH), skipped as runs skip them when looking up the launcher."""
    skip = {os.path.realpath(d) for d in [os.path.dirname(sys.executable), *exclude]}
    path = os.environ.get("PATH", "")
    outside = os.pathsep.join(p for p in path.split(os.pathsep) if p and os.path.realpath(p) not in skip)
    out = {"python": sys.version.split()[0], "python_path": sys.executable, "prefix": sys.prefix,
           "launcher": launcher, "launcher_on_path": shutil.which(launcher) or "",
           "launcher_outside_env": shutil.which(launcher, path=outside) or "",
           "mpi4py_libmpi_env": os.environ.get("MPI4PY_LIBMPI", ""), "nccl_plugins": nccl_plugins()}
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            out["mpich_wheel"] = version("mpich")
        except PackageNotFoundError:
            out["mpich_wheel"] = ""
    except ImportError:  # pragma: no cover
        out["mpich_wheel"] = ""
    try:
        import mpi4py
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
        out["mpi4py"] = mpi4py.__version__
        from mpi4py import MPI
        out["mpi_library"] = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
        out["libmpi"] = _loaded_libmpi()
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the check says what is wrong
        out["mpi4py_error"] = f"{exc.__class__.__name__}: {exc}".strip().splitlines()[0]
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--thread-level"]:
        print(json.dumps(thread_level()), flush=True)
    else:
        print(json.dumps(probe(sys.argv[1] if len(sys.argv) > 1 else "mpiexec", sys.argv[2:])))
