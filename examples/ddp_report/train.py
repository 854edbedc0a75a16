"""The same torch.distributed (gloo) script, reporting through scalestudy's reporting module.

``workloads.report`` writes per-step records, evaluations and the run's result into the
run folder, so this script's runs get the same step tables and figures as the built-in
workloads. Outside scalestudy the calls do nothing: torchrun still runs it by hand.
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

from workloads import report


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
    step = 0
    for epoch in range(args.epochs):
        for _ in range(args.steps):
            t0 = time.perf_counter()
            x = torch.randn(args.batch_size, 64, generator=generator)
            y = (x @ w).argmax(dim=1)
            t1 = time.perf_counter()
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            t2 = time.perf_counter()
            loss.backward()          # DDP's allreduces run inside backward
            t3 = time.perf_counter()
            optimizer.step()
            t4 = time.perf_counter()
            report.step(step=step, epoch=epoch, samples=args.batch_size, loss=loss.item(),
                        data=t1 - t0, forward=t2 - t1, backward=t3 - t2, update=t4 - t3)
            step += 1
        with torch.no_grad():
            x = torch.randn(512, 64, generator=teacher)
            accuracy = (model(x).argmax(dim=1) == (x @ w).argmax(dim=1)).float().mean().item()
        report.eval(epoch=epoch, top1=accuracy, loss=loss.item())
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f} accuracy {accuracy:.3f}", flush=True)
    dist.barrier()
    seconds = time.perf_counter() - start
    samples = args.epochs * args.steps * args.batch_size * world
    report.result(throughput=samples / seconds, final_train_loss=loss.item())
    print(f"rank {rank} of {world} (local rank {os.environ.get('LOCAL_RANK')}) done", flush=True)
    # Free the DDP model (its reducer holds the process group in a reference cycle) while the
    # interpreter is alive, so gloo's threads are joined before the exit (see ../ddp_gloo/train.py).
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
