#!/usr/bin/env bash
# Install into .venv if needed, then run the whole test suite (extra args go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
exec .venv/bin/python -m pytest -ra "$@"
