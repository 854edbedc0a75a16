#!/usr/bin/env bash
# A program that is not Python: every rank hashes SIZE_MB of zeros and prints its rate.
# scalestudy gives it RANK and WORLD_SIZE; a metric pattern with ranks: all sums the rates.
set -euo pipefail
size_mb=${1:-64}
start=$(date +%s.%N)
head -c "$((size_mb * 1024 * 1024))" /dev/zero | sha256sum > /dev/null
end=$(date +%s.%N)
rate=$(awk -v s="$start" -v e="$end" -v m="$size_mb" 'BEGIN { printf "%.1f", m / (e - s) }')
echo "rank ${RANK:-0} of ${WORLD_SIZE:-1}: hashed ${size_mb} MB at ${rate} MB/s"
