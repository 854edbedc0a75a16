"""A plain torch.distributed training script that knows nothing of scalestudy.

Run by hand:   torchrun --nproc-per-node 2 train.py --batch-size 32
or under MPI:  scalestudy gives each rank RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
               MASTER_PORT, which init_process_group("gloo") reads.
It prints one line per epoch and, at the end, "throughput: N samples/s" on rank 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=30, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1000 + rank)
    teacher = torch.Generator().manual_seed(1)
    w = torch.randn(64, 10, generator=teacher)

    start = time.perf_counter()
    for epoch in range(args.epochs):
        for _ in range(args.steps):
            x = torch.randn(args.batch_size, 64, generator=generator)
            y = (x @ w).argmax(dim=1)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
    dist.barrier()
    seconds = time.perf_counter() - start
    samples = args.epochs * args.steps * args.batch_size * world
    if rank == 0:
        print(f"final loss: {loss.item():.4f}")
        print(f"throughput: {samples / seconds:.1f} samples/s")
    print(f"rank {rank} of {world} (local rank {os.environ.get('LOCAL_RANK')}) done", flush=True)
    # Free the model (DDP holds the process group in a reference cycle) while the interpreter is
    # alive, so gloo's run-loop threads are joined now: left to the exit, a thread may still be
    # freeing the last collective's work, which needs the GIL the exiting interpreter no longer
    # gives ("terminate called without an active exception", exit 134, ~1 run in 8 on a 2-core
    # host with torch 2.13; pytorch/pytorch#190489 and the abandoned #179291).
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
