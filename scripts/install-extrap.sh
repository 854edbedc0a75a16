#!/usr/bin/env bash
# Extra-P, the empirical performance modeller the model is compared with
# (benchmarks/bench_model_vs_extrap.py) and whose input `scalestudy model export --format
# extrap` writes, in an environment of its own: Extra-P 4.2.5 pins numpy 1.x (numpy~=1.18)
# and scalestudy's torch wants numpy 2. Never a dependency of a sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${EXTRAP_VENV:-.venv-extrap}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "extrap==4.2.5"
"$VENV/bin/python" -c "import extrap; print('extrap', extrap.__version__, 'in', '$VENV')"
