"""A Parsl provider for Cobalt (ALCF's scheduler on Theta), which Parsl dropped in 2024.11.

Shaped like Parsl's own cluster providers (``parsl/providers/slurm/slurm.py``):
``submit`` writes an executable script ("All scripts on Theta must have their execute
bit set", ALCF) from a template and calls ``qsub --mode script``, ``_status`` parses
``qstat``, ``cancel`` calls ``qdel``. The script writes the job's nodes, given by
``COBALT_PARTNAME`` on Theta, to a node file it exports as ``PBS_NODEFILE``, where
Parsl's MPIExecutor reads the nodes it places ranks on. Every value put on the ``qsub``
command line is shell-quoted.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time

from parsl.jobs.states import JobState, JobStatus
from parsl.launchers import SimpleLauncher
from parsl.providers.cluster_provider import ClusterProvider
from parsl.providers.errors import SubmitException
from parsl.utils import RepresentationMixin

logger = logging.getLogger(__name__)

TRANSLATE = {
    "QUEUED": JobState.PENDING,
    "STARTING": JobState.PENDING,
    "USER_HOLD": JobState.HELD,
    "ADMIN_HOLD": JobState.HELD,
    "RUNNING": JobState.RUNNING,
    "EXITING": JobState.COMPLETED,
    "KILLING": JobState.COMPLETED,
}

TEMPLATE = '''#!/bin/bash -e
${scheduler_options}
export JOBNAME="${jobname}"
${worker_init}
# Theta names a job's nodes in COBALT_PARTNAME; Parsl's MPIExecutor reads them from PBS_NODEFILE
${python} -m orchestrator.pools.providers.cobalt_nodes "$$COBALT_PARTNAME" > ${nodefile}
export PBS_NODEFILE=${nodefile}

${user_script}
'''


def walltime_minutes(walltime: str) -> int:
    h, m, s = (int(x) for x in walltime.split(":"))
    return max(1, h * 60 + m + (1 if s else 0))


class CobaltProvider(ClusterProvider, RepresentationMixin):
    def __init__(self, account: str | None = None, queue: str | None = None, scheduler_options: str = "",
                 worker_init: str = "", nodes_per_block: int = 1, init_blocks: int = 0, min_blocks: int = 0,
                 max_blocks: int = 1, parallelism: float = 1, walltime: str = "00:10:00",
                 launcher=SimpleLauncher(), cmd_timeout: int = 30) -> None:
        super().__init__("cobalt", nodes_per_block, init_blocks, min_blocks, max_blocks, parallelism,
                         walltime, launcher, cmd_timeout=cmd_timeout)
        self.account = account
        self.queue = queue
        self.scheduler_options = scheduler_options
        self.worker_init = worker_init

    def _status(self) -> None:
        if not self.resources:
            return
        retcode, stdout, stderr = self.execute_wait("qstat -u $USER")
        if retcode != 0:
            logger.warning("qstat failed with %s: %s", retcode, stderr.strip())
            return
        missing = set(self.resources)
        for line in stdout.splitlines():
            parts = line.split()
            if not parts or parts[0].upper() == "JOBID" or line.startswith("="):
                continue
            job_id = parts[0]
            if job_id in self.resources and len(parts) >= 5:
                self.resources[job_id]["status"] = JobStatus(TRANSLATE.get(parts[4].upper(), JobState.UNKNOWN))
                missing.discard(job_id)
        for job_id in missing:  # qstat forgets finished jobs
            if not self.resources[job_id]["status"].terminal:
                self.resources[job_id]["status"] = JobStatus(JobState.COMPLETED)

    def submit(self, command: str, tasks_per_node: int, job_name: str = "parsl.cobalt") -> str:
        job_name = f"{job_name}.{time.time()}"
        script_path = os.path.abspath(os.path.join(self.script_dir, f"{job_name}.submit"))
        job_config = {
            "scheduler_options": self.scheduler_options,
            "worker_init": self.worker_init,
            "user_script": self.launcher(command, tasks_per_node, self.nodes_per_block),
            "python": shlex.quote(sys.executable),
            "nodefile": shlex.quote(script_path + ".nodes"),
        }
        self._write_submit_script(TEMPLATE, script_path, job_name, job_config)
        os.chmod(script_path, 0o700)
        args = ["qsub", "--mode", "script", "-n", str(self.nodes_per_block), "-t", str(walltime_minutes(self.walltime)),
                "-o", script_path + ".stdout", "-e", script_path + ".stderr"]
        if self.queue:
            args += ["-q", self.queue]
        if self.account:
            args += ["-A", self.account]
        args.append(script_path)
        retcode, stdout, stderr = self.execute_wait(shlex.join(args))
        if retcode != 0:
            raise SubmitException(job_name, f"qsub failed with {retcode}", stdout, stderr)
        job_id = stdout.strip().splitlines()[-1].strip() if stdout.strip() else ""
        if not job_id.isdigit():
            raise SubmitException(job_name, f"qsub printed no job id: {stdout!r}", stdout, stderr)
        self.resources[job_id] = {"job_id": job_id, "status": JobStatus(JobState.PENDING)}
        return job_id

    def cancel(self, job_ids: list[str]) -> list[bool]:
        retcode, _, _ = self.execute_wait(shlex.join(["qdel", *job_ids]))
        if retcode == 0:
            for job_id in job_ids:
                self.resources[job_id]["status"] = JobStatus(JobState.CANCELLED)
            return [True] * len(job_ids)
        return [False] * len(job_ids)

    @property
    def status_polling_interval(self) -> int:
        return 10
