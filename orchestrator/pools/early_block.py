"""Parsl's ``MPIExecutor`` whose first batch job goes to the scheduler while its interchange starts.

Parsl starts the interchange, waits for it to say which port the worker pools are to reach
(0.8 s on this VM: the interchange imports all of Parsl), and only then may a block be
submitted, at the scaling strategy's next tick (up to a second later). A batch job takes about
as long again to start, so in a sweep's first run the waits add up. Here the port is chosen
before the interchange starts (Parsl's own ``worker_port`` option, which the interchange binds)
and the block is submitted just before the interchange is started: the batch job starts, and
its worker pool imports Parsl, while the interchange does. The rest is Parsl's own start: it
waits for the interchange and asks which port it bound, and nothing else of Parsl runs before
that answer; the question is put only once a ZeroMQ socket listens on the port, so an
interchange that exits at its bind (the port taken meanwhile) is seen at once, instead of
Parsl waiting two minutes for an answer: its block is cancelled and the interchange started
again Parsl's own way (ports tried until one binds, the block submitted at the next tick).
A start that fails otherwise cancels the block and stops the interchange (``abandon`` does
the same for a ``parsl.load`` that failed in another executor's start).

Only the executor of the sweep's first run gets this: a block for a node count whose runs come
later would sit idle in its allocation until then.
"""

from __future__ import annotations

import logging
import random
import socket
import time

from parsl.executors import MPIExecutor

from ..errors import ScalestudyError

log = logging.getLogger(__name__)

INTERCHANGE_START_S = 120.0   # what Parsl allows its interchange to start


class InterchangeStartError(ScalestudyError):
    """The interchange did not come up on the port chosen for it (one line; the sweep stops)."""


class InterchangeExited(InterchangeStartError):
    """The interchange exited before listening (its port taken): started again, Parsl's way."""


def free_port(address: str | None, port_range: tuple[int, int], tries: int = 50) -> int:
    """A port of ``port_range`` nothing listens on now, on ``address`` (all addresses if None)."""
    low, high = port_range
    for _ in range(tries):
        port = random.randint(low, high - 1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address or "", port))
            except OSError:
                continue
            return port
    raise InterchangeStartError(f"no free port in {low}-{high} on {address or 'this host'} for Parsl's interchange")


class EarlyBlockMPIExecutor(MPIExecutor):
    def __init__(self, *args, early_block: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.early_block = early_block
        self._launch_template = self.launch_cmd

    def initialize_scaling(self):
        """Parsl fills its launch command in place; here it can be filled twice (early, then in
        Parsl's ``start``), each time from the template."""
        self.launch_cmd = self._launch_template
        super().initialize_scaling()

    def _start_local_interchange_process(self) -> None:
        if not self.early_block or self.worker_port is not None:
            super()._start_local_interchange_process()
            return
        self.worker_port = chosen = free_port(self.address, self.worker_port_range)
        self.initialize_scaling()                 # the launch command, with the chosen port
        early = self.scale_out_facade(1)          # the batch job goes to the scheduler now
        client = self.command_client
        asked = client.run

        def run(message, *args, **kwargs):
            if message == "WORKER_BINDS":
                self.wait_until_listening(chosen)
            return asked(message, *args, **kwargs)

        client.run = run
        try:
            super()._start_local_interchange_process()
        except InterchangeExited as exc:
            # the port was taken between the check and the bind (another process, or one listening
            # on IPv6 only): Parsl's own start instead, whose interchange tries ports until one
            # binds; the block that was given this port goes, and the strategy submits a new one
            log.warning("%s; starting it on a port of its own choosing instead", exc)
            self.cancel_blocks(early)
            self.forget_blocks(early)   # else Parsl counts it a failed block and gives up on the executor
            self.interchange_proc, self.worker_port = None, None
            del client.run
            super()._start_local_interchange_process()
            return
        except BaseException:
            self.cancel_blocks(early)
            self.forget_blocks(early)   # cancelled once: ``abandon`` after the failed load finds none
            self.stop_interchange()
            raise
        finally:
            client.__dict__.pop("run", None)

    def wait_until_listening(self, port: int, timeout_s: float = INTERCHANGE_START_S) -> None:
        """Until a ZeroMQ socket listens on ``port`` while the interchange lives (Parsl's question
        for its port would wait on an interchange that has exited)."""
        deadline = time.monotonic() + timeout_s
        host = self.address or "127.0.0.1"
        while not zmq_listens(host, port):
            code = self.interchange_proc.poll() if self.interchange_proc is not None else None
            if code is not None:
                raise InterchangeExited(
                    f"Parsl's interchange exited as it started (exit code {code}), before listening on worker "
                    f"port {port}; its log is {self.logdir}/interchange.log")
            if time.monotonic() > deadline:
                raise InterchangeStartError(f"Parsl's interchange did not listen on worker port {port} within "
                                            f"{timeout_s:.0f} s; its log is {self.logdir}/interchange.log")
            time.sleep(0.02)

    def cancel_blocks(self, block_ids: list[str]) -> None:
        """Cancel these blocks' batch jobs; a job the scheduler would not cancel is named in
        the log, with the command that cancels it by hand."""
        jobs = [self.blocks_to_job_id[b] for b in block_ids if b in self.blocks_to_job_id]
        if not jobs:
            return
        try:
            done = self.provider.cancel(jobs) or []
        except Exception:  # the command failed or timed out
            done = []
        for job, ok in zip(jobs, [*done, *[False] * len(jobs)]):
            if not ok:
                log.warning("batch job %s of a failed start could not be cancelled: cancel it by hand "
                            "(scancel, qdel)", job)

    def forget_blocks(self, block_ids: list[str]) -> None:
        """Drop cancelled blocks from Parsl's books (before its poller has seen them)."""
        for block in block_ids:
            job = self.blocks_to_job_id.pop(block, None)
            self.job_ids_to_block.pop(job, None)
            self._status.pop(block, None)
            self._simulated_status.pop(block, None)

    def abandon(self) -> None:
        """``parsl.load`` failed (this executor's start or a later one's): Parsl cleans up
        nothing, so the blocks submitted and the interchange started go here."""
        self.cancel_blocks(list(self.blocks_to_job_id))
        self.stop_interchange()

    def stop_interchange(self) -> None:
        """A start that failed leaves no interchange: Parsl's shutdown never runs for it."""
        proc, self.interchange_proc = self.interchange_proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except Exception:
                proc.kill()


ZMTP_SIGNATURE_FIRST_BYTE = 0xFF   # ZeroMQ's greeting, sent by a listening socket on accepting


def zmq_listens(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """A ZeroMQ socket (not just anything) accepts on ``host:port``: it greets first."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            head = conn.recv(1)
    except OSError:
        return False
    return head[:1] == bytes([ZMTP_SIGNATURE_FIRST_BYTE])
