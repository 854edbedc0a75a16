#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv.
# torch goes in first, pinned to the CPU build: a bare `torch` requirement would pull
# a multi-GB CUDA build. Re-running is cheap: nothing is reinstalled unless
# pyproject.toml changed.
#
# FACILITY=1: on a facility's login node, on top of its Python module (ALCF's conda, NERSC's
# pytorch: docs/how-to/real-machines.md): the venv sees the module's packages
# (--system-site-packages: its CUDA torch and its mpi4py built on Cray MPICH) and installs
# scalestudy without dependencies, then only the pure-Python dependencies the module lacks;
# torch, mpi4py and the mpich wheel are never installed over the module's.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
FACILITY=${FACILITY:-}

if [ -n "$FACILITY" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    echo "setup-env: creating $VENV on $($PYTHON -c 'import sys; print(sys.prefix)') (--system-site-packages)"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  fi
  if ! "$VENV/bin/python" -c "import torch, mpi4py" 2>/dev/null; then
    echo "setup-env: FACILITY=1: $VENV's base Python has no torch or mpi4py; load the facility's module first" \
         "(module load conda; conda activate base / module load pytorch) and remove $VENV" >&2
    exit 2
  fi
  stamp="$VENV/.scalestudy-installed"
  want="$(sha256sum pyproject.toml | cut -c1-16) facility"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
  fi
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  "$VENV/bin/pip" install -q --no-deps -e . --config-settings editable_mode=compat
  # the declared dependencies but torch and mpi4py (the module's); pip leaves those the module
  # already satisfies alone
  deps=$("$VENV/bin/python" - <<'EOF'
import re
text = open("pyproject.toml").read()
block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
names = re.findall(r'^\s*"([^"]+)"', block, re.M)
print("\n".join(d for d in names if re.split(r"[<>=!~\[; ]", d)[0] not in ("torch", "mpi4py")))
EOF
)
  mapfile -t deps <<< "$deps"
  "$VENV/bin/pip" install -q "${deps[@]}"
  "$VENV/bin/python" -c "import torch, mpi4py; print(f'setup-env: torch {torch.__version__} (CUDA {torch.version.cuda}), mpi4py {mpi4py.__version__}, from', torch.__file__.rsplit('/torch/', 1)[0])"
  echo "$want" > "$stamp"
  exit 0
fi

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
# (mpi: system sites) use FACILITY=1 above (docs/how-to/real-machines.md)
EXTRAS=${EXTRAS-test,mpich}
echo "setup-env: installing torch==$TORCH_VERSION and scalestudy[$EXTRAS] (1-3 minutes the first time)"
"$VENV/bin/pip" install -q "torch==$TORCH_VERSION" 2> >(grep -v "^WARNING: Location" >&2)
# compat mode puts the source tree on sys.path, so Hydra finds the hydra_plugins namespace package.
target="."; if [ -n "$EXTRAS" ]; then target=".[$EXTRAS]"; fi
"$VENV/bin/pip" install -q -e "$target" --config-settings editable_mode=compat 2> >(grep -v "^WARNING: Location" >&2)
echo "$want" > "$stamp"
