#!/usr/bin/env bash
# An environment that differs from the project's own (.venv) only in the releases it is given:
#   bash scripts/setup-version-env.sh NAME REQUIREMENT...
#   bash scripts/setup-version-env.sh parsl-floor "parsl==2025.6.30"
# makes .venv-NAME, where those requirements (and whatever they need that .venv lacks or has
# at another version) are installed, and everything else is .venv's: its site-packages follow
# the environment's own on sys.path (a .pth file), and its non-Python programs (mpiexec, the
# MPI library of the mpich wheel) are linked in. Python programs come from the packages
# installed here (Parsl's process_worker_pool.py and interchange.py run this environment's
# Python). Its python runs the test suites on those releases (.ci/run):
#   .venv-NAME/bin/python -m pytest tests/...
# About 10-20 s when the requirement's wheels are in pip's cache; re-running is free unless
# pyproject.toml or the requirements changed.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${1:?usage: setup-version-env.sh NAME REQUIREMENT...}
shift
[ "$#" -gt 0 ] || { echo "setup-version-env: no requirement given" >&2; exit 2; }
ENV=".venv-$NAME"
bash scripts/setup-env.sh          # the project's own environment, which this one extends
BASE=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
stamp="$ENV/.scalestudy-version-env"
want="$(sha256sum pyproject.toml | cut -c1-16) $(cat .venv/.scalestudy-installed) $*"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
start=$(date +%s)
rm -rf "$ENV"
.venv/bin/python -m venv --without-pip "$ENV"
SITE=$("$ENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
# .venv's packages after this environment's own (site.addsitedir also reads .venv's .pth files:
# the project's editable install among them)
echo "import site; site.addsitedir('$BASE')" > "$SITE/zz-scalestudy-base-env.pth"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# pip sees .venv's packages through that file: it installs here only what the requirements need
# and .venv does not have ("Not uninstalling ... outside environment": .venv is left as it is)
.venv/bin/pip --python "$ENV/bin/python" install -q "$@" 2>&1 \
  | grep -v -e "^WARNING: Location" -e "outside environment" -e "No files were found to uninstall" >&2 || true
.venv/bin/pip --python "$ENV/bin/python" check >/dev/null 2>&1 \
  || .venv/bin/pip --python "$ENV/bin/python" check | grep -v "^WARNING" >&2 || true
for req in "$@"; do   # the pins really took
  "$ENV/bin/python" - "$req" <<'EOF'
import sys
from importlib import metadata
from packaging.requirements import Requirement
req = Requirement(sys.argv[1])
have = metadata.version(req.name)
if not req.specifier.contains(have, prereleases=True):
    sys.exit(f"setup-version-env: {req.name} {have} is installed, not {req}")
EOF
done
# .venv's programs that are not Python scripts of .venv's (mpiexec, hydra_pmi_proxy ...), and the
# MPI library wheel_libmpi() looks for under sys.prefix/lib
for f in .venv/bin/*; do
  name=$(basename "$f")
  [ -e "$ENV/bin/$name" ] && continue
  [ -f "$f" ] || continue
  case "$(head -c 2 "$f")" in '#!') continue ;; esac
  ln -s "$(realpath "$f")" "$ENV/bin/$name"
done
for f in .venv/lib/*; do
  name=$(basename "$f")
  [ -e "$ENV/lib/$name" ] || ln -s "$(realpath "$f")" "$ENV/lib/$name"
done
echo "$want" > "$stamp"
echo "setup-version-env: $ENV ($*) in $(( $(date +%s) - start )) s"
