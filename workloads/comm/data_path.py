"""How a reduction's bytes travel between ranks: the one seam between an engine and the device.

The engines (``background``, ``partial``, the parameter server) decide *what* to reduce
and *when*, on the host, over MPI (negotiation stays on MPI: a few bytes per cycle). A
``DataPath`` moves the tensor itself: it starts a sum over all ranks, in place, and
hands back a ``Transfer`` to test or wait on. One engine code path serves CPU and GPU
tensors, as PyTorch DDP keeps one reducer and Horovod one optimizer wrapper:

- ``HostMPI`` (``mpi``): ``MPI_Iallreduce`` on host memory, zero copies. The CPU default.
- ``TorchDistributed`` (``torch_distributed``): ``torch.distributed.all_reduce`` on the
  tensor's device: NCCL on CUDA (what Horovod and DDP use on GPUs: NVLink within a node,
  GPUDirect RDMA across), gloo on CPU (which is how the CPU tests exercise this path).
- ``CudaAwareMPI`` (``cuda_aware_mpi``): ``MPI_Iallreduce`` on the device pointer itself, for
  sites whose MPI is GPU-aware (Cray MPICH with its GTL library and
  ``MPICH_GPU_SUPPORT_ENABLED=1``). The tensor's producing stream is synchronised first:
  MPI knows nothing of CUDA streams.
- ``HostStaging`` (``host_staging``): device -> pinned host buffer (on a copy stream, after
  an event recorded on the producing stream), ``MPI_Iallreduce`` on the host, back again;
  what works everywhere, and what two ranks sharing one GPU can use (NCCL refuses that).

``Device`` hides the CUDA calls (streams, events, pinned memory) so that on CPU the same
staging code runs with plain copies and events that are always complete.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque

import torch
from mpi4py import MPI

DATA_PATH_NAMES = ("mpi", "torch_distributed", "cuda_aware_mpi", "host_staging")


class Device:
    """The device a run's tensors live on, with what staging needs from it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        # whether a copy or an event may still be running when the call returns (a GPU; the
        # tests' stand-in, tests/fake_device/late_device.py): the host must then keep its
        # own buffers and wait for events before it reads them
        self.copies_are_async = self.cuda
        self.copy_stream = torch.cuda.Stream(device=device) if self.cuda else None

    def host_buffer(self, numel: int, dtype=torch.float32) -> torch.Tensor:
        """A host buffer a device can copy to and from asynchronously (pinned on CUDA)."""
        return torch.empty(numel, dtype=dtype, pin_memory=self.cuda)

    def mark(self):
        """An event at the current point of the producing (current) stream; None on CPU."""
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    def copy_after(self, dst: torch.Tensor, src: torch.Tensor, after) -> object:
        """Copy ``src`` into ``dst`` once ``after`` (an event) has passed, on the copy stream,
        without blocking the host; returns an event that passes when the copy is done."""
        if not self.cuda:
            dst.copy_(src)
            return None
        with torch.cuda.stream(self.copy_stream):
            if after is not None:
                self.copy_stream.wait_event(after)
            dst.copy_(src, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.copy_stream)
        return done

    @staticmethod
    def passed(event) -> bool:
        return event is None or event.query()

    @staticmethod
    def wait(event) -> None:
        if event is not None:
            event.synchronize()

    def join(self, event) -> None:
        """Make the current stream wait for ``event`` (a copy back to the device) before what
        it runs next (the optimizer), without blocking the host."""
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)


class Transfer(ABC):
    @abstractmethod
    def test(self) -> bool:
        """Whether the sum has arrived (advancing the transfer a stage if it can)."""

    @abstractmethod
    def wait(self) -> None:
        """Block until the sum has arrived."""


class _Done(Transfer):
    def test(self) -> bool:
        return True

    def wait(self) -> None:
        pass


class _Queued(Transfer):
    """A transfer whose collective its path issues, in the order transfers were started.

    Some transfers have a local stage before their collective (a copy to the host, the
    producing stream's work). When that stage ends depends on this rank's own timing, so
    issuing each collective as soon as its stage ends would let two ranks issue the same
    collectives in different orders: mismatched sums, or a hang when the sizes differ. The
    path issues instead from the head of its queue only, so a transfer whose stage is not done
    holds back every transfer started after it, and the issue order is the start order on
    every rank by construction (DDP's reducer launches its buckets in bucket order for the
    same reason; Horovod's background thread executes the coordinator's responses in order).
    """

    def __init__(self, path: "DataPath", stage=None) -> None:
        self.path = path
        self.stage = stage   # the event that ends the local stage (None: none)
        self.issued = False

    def local_done(self, block: bool) -> bool:
        """Whether the stage before the collective is done (waiting for it if ``block``)."""
        if block:
            self.path.device.wait(self.stage)
            return True
        return self.path.device.passed(self.stage)

    @abstractmethod
    def issue(self) -> None:
        """Start the collective (called by the path, in start order)."""

    @abstractmethod
    def _test_issued(self) -> bool: ...

    @abstractmethod
    def _wait_issued(self) -> None: ...

    def test(self) -> bool:
        if not self.issued:
            self.path.issue_in_order()
            if not self.issued:
                return False
        return self._test_issued()

    def wait(self) -> None:
        if not self.issued:
            self.path.issue_in_order(through=self)
        self._wait_issued()


class _MPIRequest(_Queued):
    """``MPI_Iallreduce`` in place on a buffer MPI can read at once (host memory, or device
    memory for a GPU-aware MPI once the producing stream is done)."""

    def __init__(self, path: "DataPath", buffer, ready_event=None) -> None:
        super().__init__(path, stage=ready_event)
        self.buffer, self.request = buffer, None

    def issue(self) -> None:
        self.request = self.path.comm.Iallreduce(MPI.IN_PLACE, self.buffer, op=MPI.SUM)

    def _test_issued(self) -> bool:
        return bool(self.request.Test())

    def _wait_issued(self) -> None:
        self.request.Wait()


class DataPath(ABC):
    """Starts sums over all ranks; issues their collectives in start order (``_Queued``).

    One thread at a time uses a path (the engine's thread, or the training thread in
    ``progress="hooks"``); the engines start transfers in the order their negotiation
    agreed, so every rank issues the same collectives in the same order."""
    name: str

    def __init__(self, comm: MPI.Comm, device: Device) -> None:
        self.comm, self.device = comm, device
        self._unissued: deque[_Queued] = deque()

    @property
    def label(self) -> str:
        """What a run records as the path it used (``runs.data_path_used``)."""
        return self.name

    def start(self, tensor: torch.Tensor) -> Transfer:
        """Start summing ``tensor`` (contiguous, float32, on the run's device) over all ranks,
        in place. Every rank starts the same transfers in the same order; their collectives
        are issued in that order, whatever each rank's local timing."""
        if self.comm.Get_size() == 1:
            return _Done()
        transfer = self._transfer(tensor)
        self._unissued.append(transfer)
        self.issue_in_order()
        return transfer

    @abstractmethod
    def _transfer(self, tensor: torch.Tensor) -> _Queued:
        """A transfer of ``tensor``, its local stage begun and its collective not yet issued."""

    def issue_in_order(self, through: _Queued | None = None) -> None:
        """Issue queued collectives from the head while the head's local stage is done; with
        ``through``, wait for each stage up to and including that transfer's."""
        while self._unissued:
            head = self._unissued[0]
            if not head.local_done(block=through is not None):
                return
            self._unissued.popleft()
            head.issue()
            head.issued = True
            if head is through:
                return

    def close(self) -> None:
        """Release what the path holds (process groups, buffers)."""


class HostMPI(DataPath):
    name = "mpi"

    def _transfer(self, tensor: torch.Tensor) -> _Queued:
        return _MPIRequest(self, tensor.numpy())


class CudaAwareMPI(DataPath):
    name = "cuda_aware_mpi"

    def _transfer(self, tensor: torch.Tensor) -> _Queued:
        # MPI reads the device buffer outside any CUDA stream: the collective is issued once
        # the work that produced it is done (an event on the producing stream has passed)
        buffer = tensor.detach() if self.device.cuda else tensor.numpy()
        return _MPIRequest(self, buffer, ready_event=self.device.mark())


class _Staged(_Queued):
    """device -> host (copy stream) -> MPI on the host -> device (copy stream), advanced a
    stage at a time by ``test`` so that an engine's cycle never blocks on it."""

    def __init__(self, path: "HostStaging", tensor: torch.Tensor, host: torch.Tensor) -> None:
        super().__init__(path, stage=path.device.copy_after(host, tensor, path.device.mark()))
        self.tensor, self.host = tensor, host
        self.request = None
        self.up = None
        self.done = False

    def issue(self) -> None:
        self.request = self.path.comm.Iallreduce(MPI.IN_PLACE, self.host.numpy(), op=MPI.SUM)

    def _test_issued(self) -> bool:
        device = self.path.device
        if self.done:
            return True
        if self.up is None:
            if not self.request.Test():
                return False
            self.up = device.copy_after(self.tensor, self.host, None)
        if not device.passed(self.up):
            return False
        device.join(self.up)
        self.done = True
        return True

    def _wait_issued(self) -> None:
        if self.done:
            return
        if self.up is None:
            self.request.Wait()
            self.up = self.path.device.copy_after(self.tensor, self.host, None)
        self.path.device.join(self.up)   # the optimizer's stream waits for the copy back; the host need not
        self.done = True


class HostStaging(DataPath):
    name = "host_staging"

    def _transfer(self, tensor: torch.Tensor) -> _Queued:
        # one pinned buffer per transfer in flight: a slice of a growing pool would be
        # reallocated under an earlier transfer, so each gets its own (pinned memory is cached)
        host = self.device.host_buffer(tensor.numel(), tensor.dtype).view_as(tensor)
        return _Staged(self, tensor, host)


class _TorchWork(_Queued):
    def __init__(self, path: "TorchDistributed", tensor: torch.Tensor) -> None:
        super().__init__(path)
        self.tensor, self.work = tensor, None

    def issue(self) -> None:
        # on NCCL the collective is queued on NCCL's stream after the current stream's work
        dist = self.path.dist
        self.work = dist.all_reduce(self.tensor, op=dist.ReduceOp.SUM, async_op=True)

    def _test_issued(self) -> bool:
        return self.work.is_completed()

    def _wait_issued(self) -> None:
        self.work.wait()   # on NCCL: the current stream waits for NCCL's; the host does not


class TorchDistributed(DataPath):
    """``torch.distributed`` over a process group bootstrapped through MPI (rank 0 picks an
    address and a port and broadcasts them), started under the same launcher as every path."""
    name = "torch_distributed"

    def __init__(self, comm: MPI.Comm, device: Device) -> None:
        super().__init__(comm, device)
        import torch.distributed as dist

        self.dist = dist
        self.backend = "nccl" if device.cuda else "gloo"
        self.owns_group = False
        if comm.Get_size() > 1 and not dist.is_initialized():
            init_process_group(comm, self.backend)
            self.owns_group = True

    @property
    def label(self) -> str:
        return f"{self.name}:{self.backend}"

    def _transfer(self, tensor: torch.Tensor) -> _Queued:
        return _TorchWork(self, tensor)

    def close(self) -> None:
        if self.owns_group and self.dist.is_initialized():
            self.dist.destroy_process_group()


def rendezvous(comm: MPI.Comm) -> str:
    """``tcp://host:port`` of rank 0, chosen there and broadcast over MPI."""
    import socket

    hosts = comm.allgather(socket.gethostname())
    if comm.Get_rank() == 0:
        addr = "127.0.0.1" if len(set(hosts)) == 1 else socket.gethostbyname(socket.gethostname())
        with socket.socket() as s:
            s.bind(("" if addr != "127.0.0.1" else addr, 0))
            port = s.getsockname()[1]
        url = f"tcp://{addr}:{port}"
    else:
        url = None
    return comm.bcast(url, root=0)


def init_process_group(comm: MPI.Comm, backend: str) -> None:
    import datetime

    import torch.distributed as dist

    dist.init_process_group(backend, init_method=rendezvous(comm), rank=comm.Get_rank(),
                            world_size=comm.Get_size(), timeout=datetime.timedelta(minutes=5))


class HostMirror:
    """A device tensor's copy in host memory, for engines whose progress runs on the host over
    MPI (eager-SGD's partial collectives, the parameter server). On CUDA a pinned buffer,
    filled after the producing stream's work and emptied back on the copy stream, so that
    backprop's stream is never blocked by a copy; on a CPU the tensor itself, or with
    ``separate=True`` a buffer of its own, so that the CPU tests run the copies GPU runs make."""

    def __init__(self, device: Device, tensor: torch.Tensor, separate: bool | None = None) -> None:
        self.device, self.tensor = device, tensor
        separate = device.copies_are_async if separate is None else separate
        self.host = device.host_buffer(tensor.numel(), tensor.dtype).view_as(tensor) if separate else tensor
        self.copies = 0   # device <-> host copies made (what the CPU tests check)
        self._to_device = None   # the last host -> device copy's event: it reads the host buffer until it passes

    def to_host(self):
        """The tensor's values on the host, as a NumPy array (after the work that produced them)."""
        if self.host is not self.tensor:
            self.device.wait(self.device.copy_after(self.host, self.tensor, self.device.mark()))
            self.copies += 1
        return self.host.numpy()

    def to_device(self) -> None:
        """The host buffer's values back into the tensor, before the stream's next work."""
        if self.host is not self.tensor:
            self._to_device = self.device.copy_after(self.tensor, self.host, None)
            self.device.join(self._to_device)
            self.copies += 1

    def writable(self):
        """The host buffer, as a NumPy array to write into (an MPI receive), once the last copy
        back to the device has read it: on CUDA that copy runs on the copy stream after the host
        has moved on (``join`` holds the device's stream, not the host), so a write before it
        passes would send the device the new values for the old step."""
        if self._to_device is not None:
            self.device.wait(self._to_device)
            self._to_device = None
        return self.host.numpy()

    def fill(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` into the host buffer (``writable``'s wait first); the buffer. eager-SGD
        applies several rounds' results in a row through it."""
        self.writable()
        return self.host.copy_(values)


PATHS = {cls.name: cls for cls in (HostMPI, TorchDistributed, CudaAwareMPI, HostStaging)}


def open_data_path(name: str, comm: MPI.Comm, device: torch.device) -> DataPath:
    return PATHS[name](comm, Device(device))
