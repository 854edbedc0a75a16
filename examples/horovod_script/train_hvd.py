"""A Horovod training script, unmodified: Horovod initialises MPI from the launcher's ranks.

Needs Horovod (bash scripts/install-horovod.sh). Prints "throughput: N samples/s" on rank 0.
"""

from __future__ import annotations

import argparse
import time

import horovod.torch as hvd
import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size()),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    generator = torch.Generator().manual_seed(hvd.rank())
    w = torch.randn(64, 10, generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, 64, generator=generator)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), (x @ w).argmax(dim=1))
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    if hvd.rank() == 0:
        print(f"throughput: {args.steps * args.batch_size * hvd.size() / seconds:.1f} samples/s", flush=True)


if __name__ == "__main__":
    main()
