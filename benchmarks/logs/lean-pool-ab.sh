#!/bin/bash
# A = 2db71d9 (before this session's changes), B = d50e6e1 checked out (bdd8cb4 + the lean batch job and
# interchange); log: lean-pool-ab.log
bash benchmarks/ab_overhead.sh 2db71d9 7
