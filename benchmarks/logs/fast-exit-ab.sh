#!/bin/bash
# A = 2db71d9 (before: Parsl's typeguard instrumentation, interpreter teardown, Hydra's get_mode compose),
# B = bdd8cb4 checked out; log: fast-exit-ab.log
bash benchmarks/ab_overhead.sh 2db71d9 5
