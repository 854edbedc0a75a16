#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv.
# torch goes in first, pinned to the CPU build: a bare `torch` requirement would pull
# a multi-GB CUDA build. Re-running is cheap: nothing is reinstalled unless
# pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup-env: creating $VENV with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.scalestudy-installed"
want="$(sha256sum pyproject.toml | cut -c1-16) torch=$TORCH_VERSION extras=${EXTRAS-test,mpich}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
# EXTRAS: test,mpich here (the mpich wheel is this host's MPI); on a machine with its own MPI
# (mpi: system sites) EXTRAS=test, or none (README, "Running on a real machine")
EXTRAS=${EXTRAS-test,mpich}
echo "setup-env: installing torch==$TORCH_VERSION and scalestudy[$EXTRAS] (a minute or two the first time)"
"$VENV/bin/pip" install -q "torch==$TORCH_VERSION" 2> >(grep -v "^WARNING: Location" >&2)
# compat mode puts the source tree on sys.path, so Hydra finds the hydra_plugins namespace package.
target="."; if [ -n "$EXTRAS" ]; then target=".[$EXTRAS]"; fi
"$VENV/bin/pip" install -q -e "$target" --config-settings editable_mode=compat 2> >(grep -v "^WARNING: Location" >&2)
echo "$want" > "$stamp"
