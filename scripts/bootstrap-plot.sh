#!/usr/bin/env bash
# Prepares the project's Python environment: a project-local virtual
# environment at .venv/ (beside scripts/) holding, from PyPI, matplotlib
# (bench/plot) and redis-py (tests/server/redis_py_test.py, pmhash-server's
# tests with a real Redis client).
#
# Idempotent: the venv is created only if missing, and pip runs only if an
# import fails inside it, so a second run costs one Python start.
# Silent unless it installs something; then it says what on stderr.
#
# Needs python3 and python3-venv (Debian packages, see scripts/bootstrap.sh).
# Override the interpreter with PYTHON=/path/to/python3.
#
# Use afterwards:  .venv/bin/python bench/plot RESULT.json
set -euo pipefail

# Both have wheels for Debian 12's Python 3.11.
pins=("matplotlib==3.9.4" "redis==5.2.1")
python="${PYTHON:-python3}"
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"

if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap-plot: creating virtual environment $venv" >&2
  if ! "$python" -m venv "$venv"; then
    echo "bootstrap-plot: '$python -m venv' failed; install python3-venv (scripts/bootstrap.sh)" >&2
    exit 1
  fi
fi

if "$venv/bin/python" -c 'import matplotlib, redis' 2>/dev/null; then
  exit 0
fi

echo "bootstrap-plot: installing ${pins[*]} into $venv" >&2
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"; then
  echo "bootstrap-plot: pip could not install ${pins[*]} (is PyPI reachable?)" >&2
  exit 1
fi
