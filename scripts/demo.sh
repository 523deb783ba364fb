#!/usr/bin/env bash
# The README walkthrough: install statekit into .venv, run the word count job on the mini
# runtime, take a savepoint when its input ends, list, inspect and verify it, rescale it offline,
# diff it against the rescaled copy, control a detached job (savepoint, stop with a savepoint),
# export state to Parquet on this machine and on Spark (the same files; read back with pyarrow),
# and inspect a real Flink savepoint. Output goes to ./demo-out/. Takes about a minute after
# the install (the Spark export's session start is most of it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh "spark"
export PATH="$PWD/.venv/bin:$PATH"
out="${DEMO_OUT:-$PWD/demo-out}"  # everything the demo writes (removed first)
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
# the sink writes word<TAB>running count on every update: a word's final count is its largest
echo; echo "committed output (exactly once), final counts of the top words:"
awk -F'\t' '$2 + 0 > c[$1] + 0 { c[$1] = $2 } END { for (w in c) printf "%s\t%s\n", w, c[w] }' \
  "$out"/counts/part-* | sort -t$'\t' -k2,2nr -k1,1 | head -5

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

echo; echo "== 6. Job control: run a job in the background, take a savepoint, stop it with a savepoint"
printf '\n\033[1m$ %s\033[0m\n' "statekit run -d -p 2 ... examples/clickstream.py --events 50000000"
job=$(statekit run -d -p 2 --checkpoint-dir "$out/checkpoints" --checkpoint-interval 500ms \
  examples/clickstream.py --events 50000000 --output "$out/clicks")
echo "$job"
sleep 2  # a few checkpoints (every 500 ms): `list` shows the last one
step statekit list
step statekit savepoint "$job" "$out/savepoints"
step statekit stop "$job" --savepoint-path "$out/savepoints"
step statekit list --all

echo; echo "== 7. Export the savepoint to Parquet: on this machine (auto: small state), then on Spark"
step statekit export "$savepoint" -o "$out/export"
printf '\n\033[1m$ %s\033[0m\n' "statekit export $savepoint -o $out/export-spark --engine spark"
statekit export "$savepoint" -o "$out/export-spark" --engine spark
python - "$out/export" "$out/export-spark" <<'PY'
import sys
import pyarrow.compute as pc
import pyarrow.dataset as ds
tables = [ds.dataset(f"{root}/operator_uid=counter/state_name=count", format="parquet").to_table() for root in sys.argv[1:]]
table = tables[0]
print(f"counter/count: {table.num_rows} rows, columns {', '.join(table.column_names)}")
top = table.sort_by([("value", "descending"), ("key", "ascending")]).slice(0, 3)
print("top words:", ", ".join(f"{k}={v}" for k, v in zip(top["key"].to_pylist(), top["value"].to_pylist())),
      f"(total {pc.sum(table['value']).as_py()} words)")
rows = [sorted(map(str, t.to_pylist())) for t in tables]
print("local and Spark exports:", "the same rows and columns" if rows[0] == rows[1] and
      tables[0].schema.remove_metadata() == tables[1].schema.remove_metadata() else "DIFFERENT")
PY

echo; echo "== 8. A real Apache Flink 2.3 savepoint, read without a JVM"
step statekit inspect tests/golden/flink-2.3/hashmap/savepoints/savepoint-962f67-bfc4c25148ed
step statekit keygroup hello --flink --key-type string --max-parallelism 128 -p 2

echo
echo "Demo finished: everything above ran against $out"
