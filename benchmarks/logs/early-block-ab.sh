#!/bin/bash
# A = 7c14bd1 (before the early block and the fork server), B = a73285c checked out; log: early-block-ab.log
bash benchmarks/ab_overhead.sh 7c14bd1 5
