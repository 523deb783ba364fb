"""The PyFlink job behind the golden Flink fixtures (run by scripts/gen_flink_fixtures.py).

Runs in the PyFlink virtualenv (scripts/install_pyflink.sh), never in statekit's own. One job,
two keyed operators, max parallelism 256, the state frozen once the input is consumed, so
that every snapshot taken afterwards holds the same state:

    numbers 0.. (NumberSequenceSource, endless) -> throttle (map) -> first N (filter)
      -> key_by "key-<n % KEYS>"  -> "profile" (uid, parallelism 3): keyed process function
           count     ValueState LONG                    (python coder: 8 bytes)
           name      ValueState STRING, TTL 7 days      (TTL wrapper)
           ratio     ValueState DOUBLE
           flag      ValueState BOOLEAN
           pair      ValueState ROW_NAMED(tag STRING, n INT)
           recent    ListState INT
           buckets   MapState STRING -> LONG            (map keys: ByteArrayWrapper)
           + an event-time timer per key at FAR_FUTURE + n (never fires: no watermarks)
      -> key_by n % SPARSE (INT)  -> "sparse" (uid, parallelism 2): keyed process function
           total     ValueState LONG
           seen      ListState STRING, TTL 7 days
           + a processing-time timer per key at FAR_FUTURE + n
      -> a filter that drops everything (no sink output)

Usage (from the generator):  python flink_fixture_job.py OUT BACKEND INLINE_THRESHOLD PLAN
    OUT        absolute directory: OUT/checkpoints/<job-id>/chk-N, OUT/savepoints/savepoint-*
    BACKEND    hashmap | rocksdb  (rocksdb: incremental checkpoints)
    INLINE     execution.checkpointing.data-inline-threshold, e.g. 20kb or 0
    PLAN       comma-separated savepoints to take once the state is frozen: canonical, native

Prints one JSON line "FIXTURE {...}" with the job id and the snapshot paths.
"""

import glob
import json
import os
import sys
import time

from pyflink.common import Configuration, Row, Types, WatermarkStrategy
from pyflink.common.time import Time
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)

N = 3000  # records that reach the keyed operators
KEYS = 1000  # "profile" keys: sparse enough to leave key groups empty at 256 key groups
SPARSE = 40  # "sparse" keys
FAR_FUTURE = 4102444800000  # 2100-01-01 in epoch ms
MAX_PARALLELISM = 256

OUT, BACKEND, INLINE, PLAN = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
MARKER = os.path.join(OUT, "input-consumed")


def ttl() -> StateTtlConfig:
    return StateTtlConfig.new_builder(Time.days(7)).build()


class Profile(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        name = ValueStateDescriptor("name", Types.STRING())
        name.enable_time_to_live(ttl())
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.name = ctx.get_state(name)
        self.ratio = ctx.get_state(ValueStateDescriptor("ratio", Types.DOUBLE()))
        self.flag = ctx.get_state(ValueStateDescriptor("flag", Types.BOOLEAN()))
        self.pair = ctx.get_state(ValueStateDescriptor(
            "pair", Types.ROW_NAMED(["tag", "n"], [Types.STRING(), Types.INT()])))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent", Types.INT()))
        self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", Types.STRING(), Types.LONG()))

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        n = int(value)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.name.update(f"user-{n % KEYS}")
        self.ratio.update(n / 7.0)
        self.flag.update(n % 2 == 0)
        self.pair.update(Row(tag=f"t{n % 5}", n=n))
        self.recent.add(n)
        bucket = f"b{n % 3}"
        self.buckets.put(bucket, (self.buckets.get(bucket) or 0) + n)
        ctx.timer_service().register_event_time_timer(FAR_FUTURE + n % KEYS)
        yield n


class Sparse(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        seen = ListStateDescriptor("seen", Types.STRING())
        seen.enable_time_to_live(ttl())
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG()))
        self.seen = ctx.get_list_state(seen)

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        n = int(value)
        self.total.update((self.total.value() or 0) + n)
        self.seen.add(f"n{n}")
        ctx.timer_service().register_processing_time_timer(FAR_FUTURE + n % SPARSE)
        yield n


def throttle(n: int) -> int:
    if n == N:  # every record below N is ahead of this one in the (ordered) stream
        with open(MARKER, "w") as marker:
            marker.write(str(time.time()))
    if n >= N:
        time.sleep(0.002)
    return n


def configuration() -> Configuration:
    conf = Configuration()
    settings = {
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.dir": f"file://{OUT}/checkpoints",
        "execution.checkpointing.savepoint-dir": f"file://{OUT}/savepoints",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.checkpointing.num-retained": "1",
        "execution.checkpointing.data-inline-threshold": INLINE,
        "state.backend.type": BACKEND,
        "execution.checkpointing.incremental": str(BACKEND == "rocksdb").lower(),
        "python.fn-execution.bundle.size": "100",
        "python.fn-execution.bundle.time": "100",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "taskmanager.numberOfTaskSlots": "4",
        # the same settings under their Flink 1.x names (2.x reads the keys above)
        "state.checkpoints.dir": f"file://{OUT}/checkpoints",
        "state.savepoints.dir": f"file://{OUT}/savepoints",
        "state.checkpoints.num-retained": "1",
        "state.storage.fs.memory-threshold": INLINE,
        "state.backend.incremental": str(BACKEND == "rocksdb").lower(),
    }
    for key, value in settings.items():
        conf.set_string(key, value)
    return conf


def build(env: StreamExecutionEnvironment) -> None:
    numbers = env.from_source(NumberSequenceSource(0, 10**12), WatermarkStrategy.no_watermarks(),
                              "numbers").set_parallelism(1).uid("numbers")
    first = (numbers.map(throttle, output_type=Types.LONG()).set_parallelism(1).uid("throttle")
             .filter(lambda n: n < N).set_parallelism(1).uid("first-n"))
    profile = (first.key_by(lambda n: f"key-{n % KEYS}", key_type=Types.STRING())
               .process(Profile(), output_type=Types.LONG()).set_parallelism(3).uid("profile"))
    sparse = (profile.key_by(lambda n: n % SPARSE, key_type=Types.INT())
              .process(Sparse(), output_type=Types.LONG()).set_parallelism(2).uid("sparse"))
    sparse.filter(lambda n: False).set_parallelism(1).uid("drop").print()


def latest_checkpoint(job_id: str) -> tuple[int, str] | None:
    found = [(int(p.split("chk-")[1].split("/")[0]), os.path.dirname(p))
             for p in glob.glob(f"{OUT}/checkpoints/{job_id}/chk-*/_metadata")]
    return max(found) if found else None


def wait_for(predicate, what: str, timeout: float = 300.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment(configuration())
    env.set_max_parallelism(MAX_PARALLELISM)
    build(env)
    client = env.execute_async("statekit-fixtures")
    job_id = str(client.get_job_id())
    print("job id", job_id, flush=True)
    wait_for(lambda: os.path.exists(MARKER), "the input to be consumed")
    # max one checkpoint at a time: checkpoint c0 + 2 is triggered after the marker was seen, so
    # its barriers follow every record below N on every channel
    c0 = (latest_checkpoint(job_id) or (0, ""))[0]
    wait_for(lambda: (latest_checkpoint(job_id) or (0, ""))[0] >= c0 + 2, "a checkpoint of the frozen state")
    from pyflink.java_gateway import get_gateway

    formats = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType
    savepoints = {}
    for kind in PLAN:
        fmt = formats.NATIVE if kind == "native" else formats.CANONICAL
        savepoints[kind] = client._j_job_client.triggerSavepoint(f"file://{OUT}/savepoints", fmt).get()
        print("savepoint", kind, savepoints[kind], flush=True)
    client.cancel().result()
    time.sleep(2)
    checkpoint = latest_checkpoint(job_id)  # the one retained on cancellation
    print("FIXTURE " + json.dumps({"job_id": job_id, "checkpoint": checkpoint[1] if checkpoint else None,
                                   "savepoints": savepoints}), flush=True)


if __name__ == "__main__":
    main()
