#!/usr/bin/env python3
"""A scripted stand-in for the Cobalt and PBS Pro command lines, for tests on a machine without them.

Installed as small qsub / qstat / qdel wrappers (and aprun for Cobalt, a PALS-style
mpiexec for PBS) in a folder put first on PATH; each runs ``fake_sched.py TOOL ARGS``. It checks every argument it receives the way the
real tools would refuse bad ones, logs each call to $FAKE_SCHED_DIR/calls.jsonl,
and really runs submitted scripts on this host (with COBALT_NODEFILE / PBS_NODEFILE
and the job id variables set), so Parsl's real provider code drives real MPI runs.
Flavor: $FAKE_SCHED_FLAVOR = cobalt | pbs.
"""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ["FAKE_SCHED_DIR"])
FLAVOR = os.environ["FAKE_SCHED_FLAVOR"]
NAME = re.compile(r"^[A-Za-z0-9_.@+-]+$")


TOOL = sys.argv[1] if len(sys.argv) > 1 else "?"


def die(msg: str, code: int = 1) -> None:
    print(f"{TOOL}: {msg}", file=sys.stderr)
    sys.exit(code)


def log_call() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "calls.jsonl", "a") as fh:
        fh.write(json.dumps({"tool": TOOL, "argv": sys.argv[2:]}) + "\n")


def next_id() -> int:
    counter = STATE / "counter"
    n = int(counter.read_text()) + 1 if counter.exists() else 1000
    counter.write_text(str(n))
    return n


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie (exited, not yet reaped) is done
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def start(job_id: str, script: Path, nodes: int, env_extra: dict, out: str, err: str) -> None:
    nodefile = STATE / f"{job_id}.nodes"
    names = ["localhost"] * nodes if FLAVOR == "pbs" else [f"nid{i:05d}" for i in range(nodes)]
    nodefile.write_text("\n".join(names) + "\n")
    env = dict(os.environ, **env_extra)
    env["COBALT_NODEFILE" if FLAVOR == "cobalt" else "PBS_NODEFILE"] = str(nodefile)
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(["bash", str(script)], stdout=o, stderr=e, env=env, start_new_session=True,
                                cwd=os.environ.get("HOME", "/"))
    (STATE / f"{job_id}.job").write_text(json.dumps({"pid": proc.pid, "nodes": nodes}))


def jobs() -> dict:
    out = {}
    for f in STATE.glob("*.job"):
        out[f.stem] = json.loads(f.read_text())
    return out


def cobalt_qsub(args: list) -> None:
    opts, script = {}, None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--mode", "-n", "-t", "-q", "-A", "-o", "-e"):
            if i + 1 >= len(args):
                die(f"option {a} needs a value")
            opts[a] = args[i + 1]
            i += 2
        elif a.startswith("-"):
            die(f"unknown option {a}")
        else:
            if script is not None:
                die(f"unexpected argument {a}")
            script = a
            i += 1
    if opts.get("--mode") != "script":
        die("only --mode script jobs are accepted here")
    for flag in ("-n", "-t"):
        if not opts.get(flag, "").isdigit() or int(opts[flag]) < 1:
            die(f"{flag} needs a positive integer, got {opts.get(flag)!r}")
    for flag in ("-q", "-A"):
        if flag in opts and not NAME.match(opts[flag]):
            die(f"{flag}: bad name {opts[flag]!r}")
    if not script or not Path(script).is_file():
        die(f"no such script {script!r}")
    if "COBALT_NODEFILE" not in Path(script).read_text():
        die("the script never reads COBALT_NODEFILE")
    job_id = str(next_id())
    start(job_id, Path(script), int(opts["-n"]), {"COBALT_JOBID": job_id, "COBALT_PARTSIZE": opts["-n"]},
          opts.get("-o", os.devnull), opts.get("-e", os.devnull))
    print(job_id)


def cobalt_qstat(args: list) -> None:
    if args[:1] != ["-u"] or len(args) != 2:
        die("usage: qstat -u USER")
    print("JobID  User  WallTime  Nodes  State  Location")
    print("=" * 50)
    for job_id, job in sorted(jobs().items()):
        if alive(job["pid"]):
            print(f"{job_id}  {args[1]}  00:10:00  {job['nodes']}  running  nid00000")


def pbs_qsub(args: list) -> None:
    opts, script = {}, None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-q", "-A"):
            opts[a] = args[i + 1]
            i += 2
        elif a.startswith("-"):
            die(f"unknown option {a}")
        else:
            script = a
            i += 1
    for flag, value in opts.items():
        if not NAME.match(value):
            die(f"{flag}: bad name {value!r}")
    if not script or not Path(script).is_file():
        die(f"no such script {script!r}")
    text = Path(script).read_text()
    select = re.search(r"^#PBS -l select=(\d+):ncpus=(\d+)", text, re.M)
    walltime = re.search(r"^#PBS -l walltime=(\d+:\d\d:\d\d)$", text, re.M)
    out = re.search(r"^#PBS -o (\S+)$", text, re.M)
    err = re.search(r"^#PBS -e (\S+)$", text, re.M)
    if not (select and walltime and out and err):
        die("script lacks #PBS select / walltime / -o / -e directives")
    for line in text.splitlines():
        if line.startswith("#PBS") and not re.match(r"^#PBS -[A-Za-z] [A-Za-z0-9_.=:/@+,-]+$", line):
            die(f"bad directive {line!r}")
    job_id = f"{next_id()}.fakepbs"
    start(job_id, Path(script), int(select.group(1)), {"PBS_JOBID": job_id}, out.group(1), err.group(1))
    print(job_id)


def pbs_qstat(args: list) -> None:
    if args[:3] != ["-x", "-f", "-F"] or args[3:4] != ["json"]:
        die("usage: qstat -x -f -F json JOBID...")
    known = jobs()
    result = {}
    for job_id in args[4:]:
        if job_id in known:
            result[job_id] = {"job_state": "R" if alive(known[job_id]["pid"]) else "F"}
    print(json.dumps({"Jobs": result}))


def qdel(args: list) -> None:
    known = jobs()
    for job_id in args:
        if job_id not in known:
            die(f"unknown job {job_id}")
        try:
            os.killpg(known[job_id]["pid"], signal.SIGTERM)
        except OSError:
            pass


def real_mpiexec() -> str:
    return os.environ["FAKE_SCHED_REAL_MPIEXEC"]


def aprun(args: list) -> None:
    """Cray's aprun: -n total -N per node -node-list nids [-d depth -cc depth -j n] cmd..."""
    opts, i = {}, 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] not in ("-n", "-N", "-node-list", "-d", "-cc", "-j"):
            die(f"unknown option {args[i]}")
        opts[args[i]] = args[i + 1]
        i += 2
    cmd = args[i:]
    n, per = int(opts["-n"]), int(opts["-N"])
    nodes = opts["-node-list"].split(",")
    if len(nodes) * per != n or not all(re.match(r"^nid\d{5}$", x) for x in nodes):
        die(f"-n {n} -N {per} does not match -node-list {opts['-node-list']}")
    if "-d" in opts and (opts.get("-cc") != "depth" or not opts["-d"].isdigit()):
        die("-d needs -cc depth and an integer depth")
    # every nid is this host; hydra must not read the nodefile the job script exported
    env = {k: v for k, v in os.environ.items() if k != "PBS_NODEFILE"}
    os.execve(real_mpiexec(), [real_mpiexec(), "-hosts", "localhost", "-n", str(n), *cmd], env)


def pals_mpiexec(args: list) -> None:
    """Polaris's PALS mpiexec: -n, -ppn, -hosts, --depth=N, --cpu-bind=depth, then the command."""
    passthrough, i = [], 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a in ("-n", "-ppn", "-hosts"):
            passthrough += [a, args[i + 1]]
            i += 2
        elif re.match(r"^--depth=\d+$", a) or a == "--cpu-bind=depth":
            i += 1
        else:
            die(f"unknown option {a}")
    os.execv(real_mpiexec(), [real_mpiexec(), *passthrough, *args[i:]])


def main() -> None:
    log_call()
    tool, args = TOOL, sys.argv[2:]
    table = {
        ("cobalt", "qsub"): cobalt_qsub, ("cobalt", "qstat"): cobalt_qstat, ("cobalt", "qdel"): qdel,
        ("cobalt", "aprun"): aprun,
        ("pbs", "qsub"): pbs_qsub, ("pbs", "qstat"): pbs_qstat, ("pbs", "qdel"): qdel, ("pbs", "mpiexec"): pals_mpiexec,
    }
    if (FLAVOR, tool) not in table:
        die(f"not a {FLAVOR} tool")
    table[(FLAVOR, tool)](args)


if __name__ == "__main__":
    main()
