#!/usr/bin/env bash
# The README walkthrough: install statekit into .venv, run the word count job on the mini
# runtime, take a savepoint when its input ends, list, inspect and verify it, rescale it offline,
# diff it against the rescaled copy, and inspect a real Flink savepoint. Output goes to ./demo-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh ""
export PATH="$PWD/.venv/bin:$PATH"
out="$PWD/demo-out"
rm -rf "$out" && mkdir -p "$out/savepoints"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

mkdir -p "$out/input"
cat > "$out/input/part-1.txt" <<'TXT'
The quick brown fox jumps over the lazy dog.
The dog sleeps; the fox runs. A fox is quick!
TXT
cat > "$out/input/part-2.txt" <<'TXT'
Stream processing keeps state. State needs savepoints.
A savepoint would not restore at 3 a.m.? Inspect it, verify it, rescale it.
TXT

echo "== 1. Run the word count job at parallelism 2 with checkpoints every 200 ms;"
echo "==    when its input ends it takes a savepoint"
step statekit run -p 2 --checkpoint-dir "$out/checkpoints" --checkpoint-interval 200ms \
  --savepoint-on-finish "$out/savepoints" examples/wordcount.py --input "$out/input" --output "$out/counts"
echo; echo "committed output (exactly once):"; cat "$out"/counts/part-* | sort | tail -5

savepoint=$(ls -d "$out"/savepoints/savepoint-* | head -1)
echo; echo "== 2. Inspect, list and verify the savepoint"
step statekit checkpoints list "$out/savepoints"
step statekit inspect "$savepoint"
step statekit verify "$savepoint"

echo; echo "== 3. Read the state back with the library"
python - "$savepoint" <<'PY'
import sys
from statekit.readers.savepoint_reader import SavepointReader
reader = SavepointReader.read(sys.argv[1])
counts = sorted(((e.value, e.key) for e in reader.read_keyed_state("counter", "count")), reverse=True)
print("top words:", ", ".join(f"{w}={c}" for c, w in counts[:5]))
PY
echo; echo "== 4. Rescale the savepoint offline to parallelism 3 (whole key-group blocks, no decoding)"
step statekit rescale "$savepoint" -p 3 -o "$out/savepoints/rescaled-p3"
step statekit inspect "$out/savepoints/rescaled-p3"

echo; echo "== 5. Diff the original and the rescaled copy: same state, different layout (exit 0 = equal)"
step statekit diff "$savepoint" "$out/savepoints/rescaled-p3"

echo; echo "== 6. A real Apache Flink 2.3 savepoint, read without a JVM"
step statekit inspect tests/golden/flink-2.3/hashmap/savepoints/savepoint-962f67-bfc4c25148ed
step statekit keygroup hello --flink --key-type string --max-parallelism 128 -p 2

echo
echo "Demo finished: everything above ran against $out"
echo "Export to Parquet through Spark needs the spark extra: see docs/SPARK.md"
