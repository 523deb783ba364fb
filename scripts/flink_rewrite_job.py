"""PyFlink jobs behind the restore proof of rewritten savepoints (tests/flink/test_flink_rewrite_restore.py).

Runs in the PyFlink virtualenv (scripts/install_pyflink.sh), never in statekit's own.

    python flink_rewrite_job.py write OUT KEYS EVENTS MAX_PARALLELISM PARALLELISM BACKEND
    python flink_rewrite_job.py read SAVEPOINT RESULT KEYS MAX_PARALLELISM PARALLELISM BACKEND UID

write: numbers 0.. (endless, throttled, cut at EVENTS) -> key_by "key-<n % KEYS>" ->
  "state" (uid, keyed process function):
      count    ValueState LONG               events of the key
      seen     ListState INT                 the key's numbers, in arrival order
      buckets  MapState STRING -> LONG       "b<n % 3>" -> sum of those numbers
      + an event-time timer at FAR_FUTURE + (n % KEYS)
  Once every event is in the state (a checkpoint after the last one), it takes a canonical
  savepoint under OUT/savepoints, cancels the job and prints "REWRITE {json}" with its path.

read: restores SAVEPOINT into a job with max parallelism MAX_PARALLELISM and parallelism
  PARALLELISM (Flink refuses a savepoint of another max parallelism), whose keyed operator has
  uid UID and the same states. A bounded source sends every key once; the operator emits
  the key's state as it found it (a key whose state Flink restored into another key group
  comes back empty), and the end of input fires the restored timers. The job's sources are
  new operators, so the savepoint's own source state is left unclaimed (allowed). Writes one
  JSON object per line to RESULT.
"""

import json
import os
import sys
import time

from flink_sql_job_support import latest_checkpoint, wait_for
from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

WAIT_S = 3600.0  # the bench's savepoints of many keys take long under a loaded PyFlink

FAR_FUTURE = 4102444800000  # 2100-01-01 in epoch ms


class State(KeyedProcessFunction):
    def __init__(self, keys: int) -> None:
        self.keys = keys

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", Types.INT()))
        self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", Types.STRING(), Types.LONG()))

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        n = int(value)
        self.count.update((self.count.value() or 0) + 1)
        self.seen.add(n)
        bucket = f"b{n % 3}"
        self.buckets.put(bucket, (self.buckets.get(bucket) or 0) + n)
        ctx.timer_service().register_event_time_timer(FAR_FUTURE + n % self.keys)
        yield n


class Reader(State):
    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        yield json.dumps({"key": ctx.get_current_key(), "count": self.count.value(),
                          "seen": list(self.seen.get() or []), "buckets": dict(self.buckets.items())})

    def on_timer(self, timestamp, ctx):  # type: ignore[no-untyped-def]
        yield json.dumps({"timer": ctx.get_current_key(), "timestamp": timestamp})


def configuration(out: str, backend: str, extra: dict[str, str]) -> Configuration:
    conf = Configuration()
    settings = {
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.dir": f"file://{out}/checkpoints",
        "state.checkpoints.dir": f"file://{out}/checkpoints",
        "state.backend.type": backend,
        "python.fn-execution.bundle.size": "100",
        "python.fn-execution.bundle.time": "100",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "taskmanager.numberOfTaskSlots": "4",
        **extra,
    }
    for key, value in settings.items():
        conf.set_string(key, value)
    return conf


def write(out: str, keys: int, events: int, max_parallelism: int, parallelism: int, backend: str) -> None:
    marker = os.path.join(out, "input-consumed")

    def throttle(n: int) -> int:
        if n == events:  # every number below it is ahead of this one in the ordered stream
            with open(marker, "w") as f:
                f.write(str(time.time()))
        if n >= events:
            time.sleep(0.002)
        return n

    env = StreamExecutionEnvironment.get_execution_environment(configuration(out, backend, {}))
    env.set_max_parallelism(max_parallelism)
    numbers = env.from_source(NumberSequenceSource(0, 10**12), WatermarkStrategy.no_watermarks(),
                              "numbers").set_parallelism(1).uid("numbers")
    first = (numbers.map(throttle, output_type=Types.LONG()).set_parallelism(1).uid("throttle")
             .filter(lambda n: n < events).set_parallelism(1).uid("first-n"))
    state = (first.key_by(lambda n: f"key-{n % keys}", key_type=Types.STRING())
             .process(State(keys), output_type=Types.LONG()).set_parallelism(parallelism).uid("state"))
    state.filter(lambda n: False).set_parallelism(1).uid("drop").print()
    client = env.execute_async("statekit-rewrite-write")
    job_id = str(client.get_job_id())
    wait_for(lambda: os.path.exists(marker), "the input to be consumed", WAIT_S)
    first_checkpoint = latest_checkpoint(out, job_id)  # one checkpoint at a time: +2 follows every event
    wait_for(lambda: latest_checkpoint(out, job_id) >= first_checkpoint + 2, "a checkpoint of the whole input",
             WAIT_S)
    from pyflink.java_gateway import get_gateway

    formats = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType
    savepoint = client._j_job_client.triggerSavepoint(f"file://{out}/savepoints", formats.CANONICAL).get()
    client.cancel().result()
    print("REWRITE " + json.dumps({"job_id": job_id, "savepoint": savepoint}), flush=True)


def read(savepoint: str, result: str, keys: int, max_parallelism: int, parallelism: int, backend: str,
         uid: str) -> None:
    work = os.path.dirname(result)
    restore = {"execution.state-recovery.path": savepoint, "execution.savepoint.path": savepoint,
               "execution.state-recovery.ignore-unclaimed-state": "true",
               "execution.savepoint.ignore-unclaimed-state": "true"}
    env = StreamExecutionEnvironment.get_execution_environment(configuration(work, backend, restore))
    env.set_max_parallelism(max_parallelism)
    probes = env.from_collection([f"key-{k}" for k in range(keys)], type_info=Types.STRING())
    rows = (probes.key_by(lambda key: key, key_type=Types.STRING())
            .process(Reader(keys), output_type=Types.STRING()).set_parallelism(parallelism).uid(uid))
    with rows.execute_and_collect("statekit-rewrite-read") as results, open(result, "w") as out:
        for row in results:
            out.write(row + "\n")


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "write":
        write(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]), args[5])
    elif mode == "read":
        read(args[0], args[1], int(args[2]), int(args[3]), int(args[4]), args[5], args[6])
    else:
        raise SystemExit(f"unknown mode {mode!r}: write or read")


if __name__ == "__main__":
    main()
