#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install statekit with
# the extras given as arguments (e.g. "test,spark,connect,rocksdb"). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/python -m pip install --quiet -e "$spec"
