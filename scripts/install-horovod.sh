#!/usr/bin/env bash
# Build Horovod 0.28.1 (the last release, 2023) for algorithm=horovod, into .venv.
# Horovod ships only as an sdist and compiles with C++14, while current torch headers
# need C++17: this patches the two CMakeLists.txt files and builds against the venv's
# torch and the mpich wheel's MPI (2 min here on 2 cores; up to ~15 min elsewhere). scalestudy itself
# never depends on Horovod; algorithm=sync is its own Horovod-style engine.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "${VENV:-.venv}/bin/python" ] || bash scripts/setup-env.sh
VENV=$(cd "${VENV:-.venv}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$VENV/bin/pip" download --no-deps --no-binary :all: -d "$work" horovod==0.28.1
tar -xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
src="$work/horovod-0.28.1"
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
"$VENV/bin/pip" install -q cmake
(cd "$src" && PATH="$VENV/bin:$PATH" HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 \
  "$VENV/bin/pip" install --no-build-isolation .)
"$VENV/bin/python" -c "import horovod.torch as hvd; print('horovod', hvd.__version__ if hasattr(hvd, '__version__') else 'ok')"
