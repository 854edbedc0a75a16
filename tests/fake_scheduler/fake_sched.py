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
        fh.write(json.dumps({"tool": TOOL, "argv": sys.argv[2:], "job": os.environ.get("PBS_JOBID")
                             or os.environ.get("COBALT_JOBID")}) + "\n")


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


def job_environment(env_extra: dict) -> dict:
    """What a batch script starts with: a login environment, not the submitter's.

    Real schedulers start a job from the user's login environment (PBS passes a few PBS_O_*
    variables; neither qsub copies the submitting shell's PATH unless asked with -V). The
    stand-in's "system" is its bin/ (qsub, aprun or PALS mpiexec) and the system paths;
    FAKE_SCHED_SYSTEM_LIB, when set, plays a default-loaded MPI module (on LD_LIBRARY_PATH).
    Nothing of the test's own PATH reaches the script: what the script needs, it must set.
    """
    env = {k: v for k, v in os.environ.items() if k.startswith("FAKE_SCHED_")}
    env.update({"PATH": f"{os.environ['FAKE_SCHED_BIN']}:/usr/local/bin:/usr/bin:/bin",
                "HOME": os.environ.get("HOME", "/"), "USER": os.environ.get("USER", "user"),
                "LANG": "C.UTF-8", "SHELL": "/bin/bash"})
    if os.environ.get("FAKE_SCHED_SYSTEM_LIB"):
        env["LD_LIBRARY_PATH"] = os.environ["FAKE_SCHED_SYSTEM_LIB"]
    env.update(env_extra)
    return env


def start(job_id: str, script: Path, nodes: int, env_extra: dict, out: str, err: str) -> None:
    env = job_environment(env_extra)
    if FLAVOR == "pbs":
        # Polaris names nodes like x3006c0s13b0n0; each is this host to the stand-in's mpiexec
        nodefile = STATE / f"{job_id}.nodes"
        nodefile.write_text("".join(f"x3000c0s{i}b0n0\n" for i in range(nodes)))
        env["PBS_NODEFILE"] = str(nodefile)
        cmd = ["bash", str(script)]
    else:
        # Theta: the job's nodes as a Cray node list in COBALT_PARTNAME; the script is run itself
        env["COBALT_PARTNAME"] = "0" if nodes == 1 else f"0-{nodes - 1}"
        env["COBALT_JOBSIZE"] = str(nodes)
        cmd = [str(script)]
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(cmd, stdout=o, stderr=e, env=env, start_new_session=True,
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
    if not os.access(script, os.X_OK):
        die(f"{script}: the script must be executable (Theta: \"All scripts on Theta must have their execute bit set\")")
    if "COBALT_PARTNAME" not in Path(script).read_text():
        die("the script never reads COBALT_PARTNAME, where Theta lists a job's nodes")
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


def node_shape() -> tuple[int, int]:
    """Cores and hardware threads per core of the stand-in's nodes (the test's site file's)."""
    return int(os.environ.get("FAKE_SCHED_CORES", "2")), int(os.environ.get("FAKE_SCHED_THREADS_PER_CORE", "1"))


def _int(flag: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        die(f"{flag} needs a positive integer, got {value!r}")
    return int(value)


def aprun(args: list) -> None:
    """Cray's aprun: -n total -N per node -L node IDs [-d depth -cc depth -j n] cmd...

    Binding as Theta documents it: -j is 1, 2 or 4 hardware threads per core (at most the
    node's), -d counts CPUs in that mode, and the ranks of a node need N x d <= cores x j."""
    opts, i = {}, 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] not in ("-n", "-N", "-L", "-d", "-cc", "-j"):
            die(f"unknown option {args[i]}")
        if i + 1 >= len(args):
            die(f"option {args[i]} needs a value")
        opts[args[i]] = args[i + 1]
        i += 2
    cmd = args[i:]
    if not cmd:
        die("no program to run")
    n, per = _int("-n", opts.get("-n", "")), _int("-N", opts.get("-N", ""))
    nodes = opts.get("-L", "").split(",")
    if len(nodes) * per != n or not all(re.match(r"^\d+$", x) for x in nodes):
        die(f"-n {n} -N {per} does not match -L {opts.get('-L')} (node IDs, e.g. 3835,3836)")
    if os.environ.get("COBALT_PARTNAME"):   # only the job's own nodes
        mine = {int(x) for part in os.environ["COBALT_PARTNAME"].split(",")
                for x in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)}
        for x in nodes:
            if int(x) not in mine:
                die(f"-L {x}: not a node of this job ({os.environ['COBALT_PARTNAME']})")
    cores, threads = node_shape()
    depth = _int("-d", opts["-d"]) if "-d" in opts else 1
    j = _int("-j", opts["-j"]) if "-j" in opts else 1
    if "-d" in opts and opts.get("-cc") != "depth":
        die("-d needs -cc depth")
    if "-cc" in opts and opts["-cc"] not in ("depth", "none", "numa_node", "cpu"):
        die(f"-cc {opts['-cc']}: not a binding aprun knows")
    if j not in (1, 2, 4) or j > threads:
        die(f"-j {j}: a core has {threads} hardware thread(s); -j takes 1, 2 or 4")
    if per * depth > cores * j:
        die(f"-N {per} x -d {depth} = {per * depth} CPUs, but with -j {j} a node has {cores * j}")
    # every nid is this host; hydra must not read a node file the job script exported
    env = {k: v for k, v in os.environ.items() if k != "PBS_NODEFILE"}
    os.execve(real_mpiexec(), [real_mpiexec(), "-hosts", "localhost", "-n", str(n), *cmd], env)


def pals_mpiexec(args: list) -> None:
    """Polaris's PALS mpiexec: -n, -ppn, -hosts, --depth=N (hardware threads per rank),
    --cpu-bind=depth|core|none, then the command; ranks x depth must fit a node's hardware threads."""
    passthrough, i, depth, ppn, bind = [], 0, 1, 1, None
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a in ("-n", "-ppn", "-hosts"):
            if i + 1 >= len(args):
                die(f"option {a} needs a value")
            value = args[i + 1]
            if a == "-ppn":
                ppn = _int(a, value)
            if a == "-hosts":
                # PALS starts ranks only on the job's own nodes; every node is this host here
                hosts = value.split(",")
                if os.environ.get("PBS_NODEFILE"):
                    mine = Path(os.environ["PBS_NODEFILE"]).read_text().split()
                    for host in hosts:
                        if host not in mine:
                            die(f"-hosts {host}: not a node of this job ({','.join(mine)})")
                value = ",".join(["localhost"] * len(hosts))
            passthrough += [a, value]
            i += 2
        elif a.startswith("--depth="):
            depth = _int("--depth", a.split("=", 1)[1])
            i += 1
        elif a.startswith("--cpu-bind="):
            bind = a.split("=", 1)[1]
            if bind not in ("depth", "core", "numa", "none", "socket"):
                die(f"--cpu-bind {bind}: unknown binding")
            i += 1
        else:
            die(f"unrecognized argument {a}")
    if not args[i:]:
        die("no program to run")
    cores, threads = node_shape()
    if ppn * depth > cores * threads:
        die(f"-ppn {ppn} x --depth {depth} = {ppn * depth} hardware threads, but a node has {cores * threads}")
    if depth > 1 and bind != "depth":
        die("--depth without --cpu-bind=depth places no rank")
    # the job's node names mean nothing to hydra: it must not read the node file
    env = {k: v for k, v in os.environ.items() if k != "PBS_NODEFILE"}
    os.execve(real_mpiexec(), [real_mpiexec(), *passthrough, *args[i:]], env)


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
