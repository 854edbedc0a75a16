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
interchange that exits at its bind (the port taken meanwhile) fails the start at once, with
one line, and its block is cancelled, instead of Parsl waiting two minutes for an answer.

Only the executor of the sweep's first run gets this: a block for a node count whose runs come
later would sit idle in its allocation until then.
"""

from __future__ import annotations

import random
import socket
import time

from parsl.executors import MPIExecutor

from ..errors import ScalestudyError

INTERCHANGE_START_S = 120.0   # what Parsl allows its interchange to start


class InterchangeStartError(ScalestudyError):
    """The interchange did not come up on the port chosen for it (one line; the sweep stops)."""


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
            if self.worker_port != chosen:
                raise InterchangeStartError(f"Parsl's interchange bound worker port {self.worker_port}, not "
                                            f"{chosen}, which the first batch job was given")
        except BaseException:
            self._cancel_early(early)
            raise
        finally:
            del client.run

    def wait_until_listening(self, port: int, timeout_s: float = INTERCHANGE_START_S) -> None:
        """Until a ZeroMQ socket listens on ``port`` while the interchange lives (Parsl's question
        for its port would wait on an interchange that has exited)."""
        deadline = time.monotonic() + timeout_s
        host = self.address or "127.0.0.1"
        while not zmq_listens(host, port):
            code = self.interchange_proc.poll() if self.interchange_proc is not None else None
            if code is not None:
                raise InterchangeStartError(
                    f"Parsl's interchange exited as it started (exit code {code}), before listening on worker "
                    f"port {port}; its log is {self.logdir}/interchange.log")
            if time.monotonic() > deadline:
                raise InterchangeStartError(f"Parsl's interchange did not listen on worker port {port} within "
                                            f"{timeout_s:.0f} s; its log is {self.logdir}/interchange.log")
            time.sleep(0.02)

    def _cancel_early(self, block_ids: list[str]) -> None:
        jobs = [self.blocks_to_job_id[b] for b in block_ids if b in self.blocks_to_job_id]
        if jobs:
            try:
                self.provider.cancel(jobs)
            except Exception:  # the scheduler refused: the pool exits when it finds no interchange
                pass


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
