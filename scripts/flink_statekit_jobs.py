"""PyFlink jobs behind the restore proofs of savepoints statekit wrote (tests/flink/test_flink_write_restore.py).

Runs in the PyFlink virtualenv (scripts/install_pyflink.sh), never in statekit's own. One
process runs every job of a plan, one after the other, so the JVM starts once:

    python flink_statekit_jobs.py PLAN.json

PLAN.json is a list of jobs; each writes one JSON object per line to its "result" file and
"done" (or "failed" with the error) to its "status" file, so one refused restore does not
stop the jobs after it:

  {"job": "bootstrap", "savepoint": URI, "result": PATH, "status": PATH, "parallelism": N,
   "backend": "hashmap" | "rocksdb", "keys": K, "sparse_keys": S}
      restores operators "profile" (key STRING: count LONG, ratio DOUBLE, name STRING,
      pair ROW_NAMED(tag STRING, n INT), seen LIST<INT>, buckets MAP<STRING, LONG>, event-time
      timers) and "sparse" (key LONG: total LONG); a bounded source sends every key once, the
      operator emits the state it finds, the end of input fires the restored timers.

  {"job": "wordcount", "savepoint": URI | null, "input": DIR, "result": PATH, "status": PATH,
   "parallelism": N}
      a word count with statekit's examples/wordcount.py uids ("source", "tokenize", "counter",
      "sink") and state ("count", declared LONG): reads the text lines of the files in DIR,
      lower-cases them, splits on non-letters, keys by word, adds to the count and emits
      {"word", "count"} on every update, as the statekit job writes word<TAB>count.
"""

import json
import os
import re
import sys
import traceback

from pyflink.common import Configuration, Row, Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

WORD = re.compile(r"[^\W\d_]+")


def environment(savepoint, backend, work):  # type: ignore[no-untyped-def]
    conf = Configuration()
    settings = {
        "state.backend.type": backend,
        "execution.checkpointing.dir": f"file://{work}/checkpoints",
        "state.checkpoints.dir": f"file://{work}/checkpoints",
        "python.fn-execution.bundle.size": "1000",
        "python.fn-execution.bundle.time": "100",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "taskmanager.numberOfTaskSlots": "4",
        "execution.state-recovery.ignore-unclaimed-state": "true",
        "execution.savepoint.ignore-unclaimed-state": "true",
    }
    if savepoint:
        settings["execution.state-recovery.path"] = savepoint
        settings["execution.savepoint.path"] = savepoint
    for key, value in settings.items():
        conf.set_string(key, value)
    return StreamExecutionEnvironment.get_execution_environment(conf)


def plain(value):  # type: ignore[no-untyped-def]
    if isinstance(value, Row):
        return value.as_dict() if hasattr(value, "as_dict") else list(value)
    return value


class Profile(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.ratio = ctx.get_state(ValueStateDescriptor("ratio", Types.DOUBLE()))
        self.name = ctx.get_state(ValueStateDescriptor("name", Types.STRING()))
        self.pair = ctx.get_state(ValueStateDescriptor("pair", Types.ROW_NAMED(["tag", "n"],
                                                                                [Types.STRING(), Types.INT()])))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", Types.INT()))
        self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", Types.STRING(), Types.LONG()))

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        yield json.dumps({"op": "profile", "key": ctx.get_current_key(), "count": self.count.value(),
                          "ratio": self.ratio.value(), "name": self.name.value(), "pair": plain(self.pair.value()),
                          "seen": list(self.seen.get() or []), "buckets": dict(self.buckets.items())})

    def on_timer(self, timestamp, ctx):  # type: ignore[no-untyped-def]
        yield json.dumps({"op": "profile", "timer": ctx.get_current_key(), "timestamp": timestamp})


class Sparse(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        yield json.dumps({"op": "sparse", "key": ctx.get_current_key(), "total": self.total.value()})


def bootstrap(job, work):  # type: ignore[no-untyped-def]
    env = environment(job["savepoint"], job["backend"], work)
    parallelism = job["parallelism"]
    keys = env.from_collection([f"key-{k}" for k in range(job["keys"])], type_info=Types.STRING())
    profile = (keys.key_by(lambda key: key, key_type=Types.STRING())
               .process(Profile(), output_type=Types.STRING()).set_parallelism(parallelism).uid("profile"))
    numbers = env.from_collection([k * 1000003 for k in range(job["sparse_keys"])], type_info=Types.LONG())
    sparse = (numbers.key_by(lambda n: n, key_type=Types.LONG())
              .process(Sparse(), output_type=Types.STRING()).set_parallelism(parallelism).uid("sparse"))
    with profile.union(sparse).execute_and_collect("statekit-bootstrap-read") as rows, \
            open(job["result"], "w") as out:
        for row in rows:
            out.write(row + "\n")


class Count(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield json.dumps({"word": ctx.get_current_key(), "count": count})


def words(line):  # type: ignore[no-untyped-def]
    return WORD.findall(line.lower())


def wordcount(job, work):  # type: ignore[no-untyped-def]
    env = environment(job.get("savepoint"), "hashmap", work)
    lines = []
    for name in sorted(os.listdir(job["input"])):
        with open(os.path.join(job["input"], name), encoding="utf-8") as f:
            lines.extend(f.read().splitlines())
    source = env.from_collection(lines, type_info=Types.STRING()).uid("source")
    counts = (source.flat_map(words, output_type=Types.STRING()).uid("tokenize")
              .key_by(lambda word: word, key_type=Types.STRING())
              .process(Count(), output_type=Types.STRING()).set_parallelism(job["parallelism"]).uid("counter"))
    with counts.execute_and_collect("statekit-wordcount") as rows, open(job["result"], "w") as out:
        for row in rows:
            out.write(row + "\n")


JOBS = {"bootstrap": bootstrap, "wordcount": wordcount}


def main() -> None:
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    for job in plan:
        work = os.path.dirname(job["result"])
        os.makedirs(work, exist_ok=True)
        try:
            JOBS[job["job"]](job, work)
            status = "done"
        except Exception:  # noqa: BLE001 - the test reads the error: a refused restore is a result
            status = "failed\n" + traceback.format_exc()
        with open(job["status"], "w") as f:
            f.write(status)


if __name__ == "__main__":
    main()
