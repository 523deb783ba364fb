#!/usr/bin/env bash
# The README walkthrough: install statekit into .venv, build a savepoint with the writer
# API, then list, inspect and verify it with the CLI. Output goes to ./demo-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh ""
export PATH="$PWD/.venv/bin:$PATH"
out="$PWD/demo-out"
rm -rf "$out" && mkdir -p "$out/savepoints"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

echo "== 1. Build a savepoint with the writer API (1000 keys, parallelism 2)"
python - "$out/savepoints/savepoint-demo00-000000000001" <<'PY'
import sys
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

count = StateDescriptor("count", StateKind.VALUE, value_type="int")
offsets = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_type="int")
(SavepointWriter.new_savepoint(max_parallelism=128)
    .with_operator("counter", {count: [(f"word-{i}", i % 17 + 1) for i in range(1000)]}, parallelism=2)
    .with_operator("source", {offsets: [0, 4096]}, parallelism=2)
    .write(sys.argv[1]))
print("wrote", sys.argv[1])
PY

echo "== 2. Inspect it"
step statekit checkpoints list "$out/savepoints"
step statekit inspect "$out/savepoints/savepoint-demo00-000000000001"
step statekit verify "$out/savepoints/savepoint-demo00-000000000001"
echo
echo "Demo finished: everything above ran against $out"
