"""The PyFlink SQL job behind tests/flink/test_flink_sql_rescale_restore.py: one plan, run again on rewritten savepoints.

Runs in the PyFlink virtualenv (scripts/install_pyflink.sh), never in statekit's own. One
process (one JVM) runs every job, so the test can rewrite the first job's savepoint with
statekit while this process waits:

    python flink_sql_rescale_job.py WORK N1 N2

1. ``write``: the numbers 0..N1-1 (an endless ``NumberSequenceSource``, throttled past N1, the
   rest filtered out) go through the four group aggregates below at max parallelism 128,
   parallelism 2, on the hashmap backend; once they are all in (two checkpoints after the
   last), a canonical savepoint is taken and the job cancelled. WORK/write.json then names it.
2. The process waits for WORK/plan.json (written by the test): a list of
   ``{"name", "savepoint", "max_parallelism", "parallelism", "backend"}``. Each job restores
   its savepoint (``pipeline.max-parallelism`` set: Flink refuses another one) and reads the
   numbers N1..N2-1 (the source's state is expected removed from the savepoint: it starts
   again at 0, and the numbers are offset by N1), then finishes. Its status goes to
   WORK/NAME/status: ``done``, or ``failed`` and the error (a refused restore is a result).

Every job has the same plan, so the planner gives the SQL operators the same generated ids
(no uids; Flink refuses to restore state it cannot map). The aggregates' changelogs
(``to_changelog_stream``) go to a writer that appends each change to
WORK/NAME/QUERY-SUBTASK.jsonl as ``[row kind, field, ...]``; a key's changes all pass
through one subtask, in order. The queries, over ``user_id = 'user-' || n % 397`` (strings
of 6 to 8 bytes: inline and not), ``bucket = n % 61``, ``even = n % 2 = 0`` and
``amount = n / 8``:

    by_user:   GROUP BY user_id                 COUNT(*), SUM(n), MAX(n)
    by_pair:   GROUP BY bucket INT, even        COUNT(*), SUM(amount) DOUBLE, MIN(n)
    by_three:  GROUP BY n % 3 BIGINT, tag STRING ('t' || n % 11), even
                                                COUNT(*), MAX(n)
    distincts: GROUP BY n % 7 INT               COUNT(DISTINCT user_id), COUNT(*) (the distinct
                                                users in a map state keyed by the same row)
"""

import json
import os
import sys
import time
import traceback

from flink_sql_job_support import latest_checkpoint, wait_for
from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import FlatMapFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.table import StreamTableEnvironment

WORK, N1, N2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
MAX_PARALLELISM = 128
PLAN_TIMEOUT_S = 600

CLICKS = """
CREATE TEMPORARY VIEW clicks AS SELECT
  f0 AS n,
  CONCAT('user-', CAST(MOD(f0, 397) AS STRING)) AS user_id,
  CAST(MOD(f0, 61) AS INT) AS bucket,
  MOD(f0, 2) = 0 AS even,
  CAST(f0 AS DOUBLE) / 8 AS amount,
  CONCAT('t', CAST(MOD(f0, 11) AS STRING)) AS tag
FROM numbers
"""
QUERIES = {
    "by_user": "SELECT user_id, COUNT(*) AS cnt, SUM(n) AS total, MAX(n) AS top FROM clicks GROUP BY user_id",
    "by_pair": "SELECT bucket, even, COUNT(*) AS cnt, SUM(amount) AS amount, MIN(n) AS low FROM clicks "
               "GROUP BY bucket, even",
    "by_three": "SELECT MOD(n, 3) AS k, tag, even, COUNT(*) AS cnt, MAX(n) AS top FROM clicks GROUP BY MOD(n, 3), tag, even",
    "distincts": "SELECT CAST(MOD(n, 7) AS INT) AS b, COUNT(DISTINCT user_id) AS users, COUNT(*) AS cnt FROM clicks "
                 "GROUP BY CAST(MOD(n, 7) AS INT)",
}


class Changes(FlatMapFunction):
    """Appends every change of one query's changelog to a file per subtask; emits nothing."""

    def __init__(self, directory: str, query: str) -> None:
        self.directory, self.query, self.path = directory, query, ""

    def open(self, runtime_context: RuntimeContext) -> None:
        index = runtime_context.get_index_of_this_subtask()
        self.path = os.path.join(self.directory, f"{self.query}-{index}.jsonl")

    def flat_map(self, value):  # type: ignore[no-untyped-def]
        fields = [value[i] for i in range(len(value))]
        with open(self.path, "a") as out:  # whole lines, even when the job is cancelled
            out.write(json.dumps([value.get_row_kind().name, *fields]) + "\n")
        return []


def configuration(directory: str, backend: str, max_parallelism: int, parallelism: int,
                  savepoint: str | None) -> Configuration:
    conf = Configuration()
    settings = {
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.dir": f"file://{directory}/checkpoints",
        "execution.checkpointing.savepoint-dir": f"file://{directory}/savepoints",
        "state.backend.type": backend,
        "restart-strategy.type": "none",
        "python.fn-execution.bundle.size": "100",
        "python.fn-execution.bundle.time": "100",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "taskmanager.numberOfTaskSlots": "4",
        "table.exec.resource.default-parallelism": str(parallelism),
        "pipeline.max-parallelism": str(max_parallelism),
    }
    if savepoint:
        settings["execution.state-recovery.path"] = savepoint
    for key, value in settings.items():
        conf.set_string(key, value)
    return conf


def build(directory: str, backend: str, max_parallelism: int, parallelism: int, savepoint: str | None,
          first: int, last: int, limit: int, marker: str | None) -> StreamExecutionEnvironment:
    """The job over n = first, first + 1, ... up to ``last`` (below ``limit``; ``marker`` written when
    ``limit`` comes by); the plan is the same for every call."""
    env = StreamExecutionEnvironment.get_execution_environment(
        configuration(directory, backend, max_parallelism, parallelism, savepoint))
    env.set_parallelism(parallelism)
    t_env = StreamTableEnvironment.create(env)
    offset = first

    def gate(i: int) -> int:
        n = i + offset
        if n == limit and marker is not None:  # every number below the limit is ahead of this one
            with open(marker, "w") as f:
                f.write(str(time.time()))
        if n >= limit:
            time.sleep(0.002)
        return n

    numbers = (env.from_source(NumberSequenceSource(0, last - offset), WatermarkStrategy.no_watermarks(), "numbers")
               .set_parallelism(1).uid("numbers")
               .map(gate, output_type=Types.LONG()).set_parallelism(1).uid("gate")
               .filter(lambda n: n < limit).set_parallelism(1).uid("below-limit"))
    t_env.create_temporary_view("numbers", t_env.from_data_stream(numbers))
    t_env.execute_sql(CLICKS)
    for query, sql in QUERIES.items():
        (t_env.to_changelog_stream(t_env.sql_query(sql))
         .flat_map(Changes(directory, query), output_type=Types.STRING()).uid(f"changes-{query}"))
    return env


def write() -> str:
    directory = os.path.join(WORK, "write")
    os.makedirs(directory, exist_ok=True)
    marker = os.path.join(directory, "input-consumed")
    env = build(directory, "hashmap", MAX_PARALLELISM, 2, None, 0, 10**12, N1, marker)
    client = env.execute_async("sql-rescale-write")
    job_id = str(client.get_job_id())
    wait_for(lambda: os.path.exists(marker), "the input to be consumed")
    c0 = latest_checkpoint(directory, job_id)
    wait_for(lambda: latest_checkpoint(directory, job_id) >= c0 + 2, "two checkpoints after the input")
    from pyflink.java_gateway import get_gateway

    canonical = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType.CANONICAL
    savepoint = str(client._j_job_client.triggerSavepoint(f"file://{directory}/savepoints", canonical).get())
    client.cancel().result()
    return savepoint


def restore(job: dict) -> None:  # type: ignore[type-arg]
    directory = os.path.join(WORK, job["name"])
    os.makedirs(directory, exist_ok=True)
    env = build(directory, job["backend"], job["max_parallelism"], job["parallelism"], job["savepoint"],
                N1, N2 - 1, N2, None)
    env.execute(f"sql-rescale-{job['name']}")


def main() -> None:
    savepoint = write()
    with open(os.path.join(WORK, "write.json.tmp"), "w") as f:
        json.dump({"savepoint": savepoint}, f)
    os.rename(os.path.join(WORK, "write.json.tmp"), os.path.join(WORK, "write.json"))
    plan_path = os.path.join(WORK, "plan.json")
    wait_for(lambda: os.path.exists(plan_path), "the plan", PLAN_TIMEOUT_S)
    with open(plan_path) as f:
        plan = json.load(f)
    for job in plan:
        try:
            restore(job)
            status = "done"
        except Exception:  # noqa: BLE001 - the test reads the error: a refused restore is a result
            status = "failed\n" + traceback.format_exc()
        os.makedirs(os.path.join(WORK, job["name"]), exist_ok=True)
        with open(os.path.join(WORK, job["name"], "status"), "w") as f:
            f.write(status)


if __name__ == "__main__":
    main()
