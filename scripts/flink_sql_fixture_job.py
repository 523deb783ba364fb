"""The PyFlink SQL job behind tests/golden/flink-sql-2.3 (run by scripts/gen_flink_sql_fixtures.py).

Runs in the PyFlink virtualenv (scripts/install_pyflink.sh), never in statekit's own. The input
is the numbers 0..N-1 (NumberSequenceSource, endless, throttled past N, the rest filtered out),
turned into a table ``clicks`` by SQL expressions of n (the generator computes the same values
in Python for expected.json); four group aggregates (parallelism 2, max parallelism 128) write
into blackhole sinks:

    by_user:   GROUP BY user_id STRING
               COUNT(*), SUM(amount DOUBLE), MAX(amount), AVG(amount), SUM(price DECIMAL(10, 2)),
               MIN(ts TIMESTAMP(3)), MAX(ts6 TIMESTAMP(6)), MAX(day DATE)
    by_bucket: GROUP BY bucket BIGINT, even BOOLEAN
               COUNT(*), MIN(ratio FLOAT), MAX(tiny TINYINT), SUM(small SMALLINT), SUM(i INT),
               MAX(ltz TIMESTAMP_LTZ(3)), MIN(tag VARCHAR: short and long texts), MAX(t TIME(0))
    last:      GROUP BY n % 3, ROW(n % 5, user_id)   (the planner flattens the ROW into the key)
               LAST_VALUE of an ARRAY<INT>, a MAP<CHAR(1), BIGINT> and a STRING: accumulators
               ROW<lastValue, lastOrder> nested in the accumulator row
    distincts: GROUP BY bucket
               COUNT(DISTINCT user_id), SUM(DISTINCT tiny), COUNT(*): the distinct values in
               map states distinctAcc_0 / distinctAcc_1 (value -> Long), placeholders in accState

Once the input is consumed the state is frozen; the job waits for two more checkpoints, takes
the savepoints and is cancelled; its last checkpoint is retained.

Usage:  python flink_sql_fixture_job.py OUT BACKEND PLAN [TTL]
        python flink_sql_fixture_job.py OUT compile-plan - [TTL]
    OUT      absolute directory: OUT/savepoints/savepoint-*
    BACKEND  hashmap | rocksdb
    PLAN     comma-separated savepoints to take: canonical, native
    TTL      table.exec.state.ttl (e.g. "1 d"; default none): state values carry a last-access time

``compile-plan`` runs nothing: it compiles the same statements (``StatementSet.compilePlan``) into
OUT/plan.json. A compiled plan cannot hold a DataStream source, so there ``numbers`` is a
``datagen`` table of the same schema (``f0 BIGINT NOT NULL``): one scan node as the DataStream
one, so every other node keeps its id and type (``GroupAggregate[4]`` is node 4).

Prints one JSON line "FIXTURE {...}" with the job id, the snapshot paths and the operators'
descriptions.
"""

import json
import os
import sys
import time

from flink_sql_job_support import latest_checkpoint as latest_retained
from flink_sql_job_support import minicluster_configuration, wait_for
from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.table import StreamTableEnvironment

N = 2000
OUT, BACKEND, PLAN = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
TTL = sys.argv[4] if len(sys.argv) > 4 else "0 ms"
MARKER = os.path.join(OUT, "input-consumed")

CLICKS = """
CREATE TEMPORARY VIEW clicks AS SELECT
  f0 AS n,
  CONCAT('u', CAST(MOD(f0, 50) AS STRING)) AS user_id,
  MOD(f0, 7) AS bucket,
  MOD(f0, 2) = 0 AS even,
  CAST(f0 AS DOUBLE) / 8 AS amount,
  CAST(MOD(f0, 1000) * 0.25 AS DECIMAL(10, 2)) AS price,
  CAST(TO_TIMESTAMP_LTZ(1700000000000 + f0 * 1001, 3) AS TIMESTAMP(3)) AS ts,
  CAST(CONCAT('2024-01-', LPAD(CAST(MOD(f0, 28) + 1 AS STRING), 2, '0'), ' 10:00:00.',
              LPAD(CAST(f0 AS STRING), 6, '0')) AS TIMESTAMP(6)) AS ts6,
  CAST(CAST(TO_TIMESTAMP_LTZ(1700000000000 + f0 * 86400000, 3) AS TIMESTAMP(3)) AS DATE) AS `day`,
  CAST(f0 AS FLOAT) / 2 AS ratio,
  CAST(MOD(f0, 100) AS TINYINT) AS tiny,
  CAST(MOD(f0, 300) AS SMALLINT) AS small,
  CAST(f0 AS INT) AS i,
  TO_TIMESTAMP_LTZ(1600000000000 + f0 * 7, 3) AS ltz,
  CASE WHEN MOD(f0, 3) = 0 THEN CONCAT('tag-', CAST(f0 AS STRING))
       ELSE CONCAT('a-rather-long-tag-', CAST(f0 AS STRING)) END AS tag,
  CAST(CAST(TO_TIMESTAMP_LTZ(f0 * 61000, 3) AS TIMESTAMP(3)) AS TIME(0)) AS t
FROM numbers
"""

BY_USER = """
SELECT user_id, COUNT(*) AS cnt, SUM(amount) AS total, MAX(amount) AS max_amount,
       AVG(amount) AS avg_amount, SUM(price) AS price_sum, MIN(ts) AS first_ts,
       MAX(ts6) AS last_ts6, MAX(`day`) AS last_day
FROM clicks GROUP BY user_id
"""

LAST = """
SELECT MOD(n, 3) AS k, ROW(CAST(MOD(n, 5) AS INT), user_id) AS rk,
       LAST_VALUE(ARRAY[CAST(n AS INT), CAST(n + 1 AS INT)]) AS arr, LAST_VALUE(MAP['n', n]) AS m,
       LAST_VALUE(CAST(n AS STRING)) AS s
FROM clicks GROUP BY MOD(n, 3), ROW(CAST(MOD(n, 5) AS INT), user_id)
"""

DISTINCTS = """
SELECT bucket, COUNT(DISTINCT user_id) AS users, SUM(DISTINCT tiny) AS tinies, COUNT(*) AS cnt
FROM clicks GROUP BY bucket
"""

BY_BUCKET = """
SELECT bucket, even, COUNT(*) AS cnt, MIN(ratio) AS min_ratio, MAX(tiny) AS max_tiny,
       SUM(small) AS sum_small, SUM(i) AS sum_i, MAX(ltz) AS last_ltz, MIN(tag) AS min_tag,
       MAX(t) AS max_t
FROM clicks GROUP BY bucket, even
"""


def throttle(n: int) -> int:
    if n == N:  # every record below N is ahead of this one in the (ordered) stream
        with open(MARKER, "w") as marker:
            marker.write(str(time.time()))
    if n >= N:
        time.sleep(0.002)
    return n


def configuration() -> Configuration:
    return minicluster_configuration(OUT, BACKEND, {
        "execution.checkpointing.num-retained": "1",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "python.fn-execution.bundle.size": "100",
        "python.fn-execution.bundle.time": "100",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "table.exec.state.ttl": TTL,
    })


def latest_checkpoint(job_id: str) -> int:
    return latest_retained(OUT, job_id)


def compile_plan() -> None:
    env = StreamExecutionEnvironment.get_execution_environment(configuration())
    t_env = StreamTableEnvironment.create(env)
    t_env.execute_sql("CREATE TEMPORARY TABLE numbers (f0 BIGINT NOT NULL) WITH ('connector' = 'datagen')")
    statements = insert_statements(t_env)
    with open(os.path.join(OUT, "plan.json"), "w") as out:
        out.write(statements._j_statement_set.compilePlan().asJsonString())


def insert_statements(t_env):  # type: ignore[no-untyped-def]
    t_env.execute_sql(CLICKS)
    for name in ("by_user", "by_bucket", "last", "distincts"):
        t_env.execute_sql(f"CREATE TEMPORARY TABLE {name}_sink ({SINK_COLUMNS[name]}) "
                          "WITH ('connector' = 'blackhole')")
    statements = t_env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO by_user_sink {BY_USER}")
    statements.add_insert_sql(f"INSERT INTO by_bucket_sink {BY_BUCKET}")
    statements.add_insert_sql(f"INSERT INTO last_sink {LAST}")
    statements.add_insert_sql(f"INSERT INTO distincts_sink {DISTINCTS}")
    return statements


def main() -> None:
    if BACKEND == "compile-plan":
        compile_plan()
        return
    env = StreamExecutionEnvironment.get_execution_environment(configuration())
    t_env = StreamTableEnvironment.create(env)
    numbers = (env.from_source(NumberSequenceSource(0, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
               .set_parallelism(1).uid("numbers")
               .map(throttle, output_type=Types.LONG()).set_parallelism(1).uid("throttle")
               .filter(lambda n: n < N).set_parallelism(1).uid("first-n"))
    t_env.create_temporary_view("numbers", t_env.from_data_stream(numbers))
    client = insert_statements(t_env).execute().get_job_client()
    job_id = str(client.get_job_id())
    print("job id", job_id, flush=True)
    wait_for(lambda: os.path.exists(MARKER), "the input to be consumed")
    c0 = latest_checkpoint(job_id)
    wait_for(lambda: latest_checkpoint(job_id) >= c0 + 2, "a checkpoint of the frozen state")
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
    print("FIXTURE " + json.dumps({"job_id": job_id, "savepoints": savepoints, "n": N,
                                   "checkpoint": f"{OUT}/checkpoints/{job_id}/chk-{checkpoint}" if checkpoint else None}),
          flush=True)


SINK_COLUMNS = {
    "by_user": "user_id STRING, cnt BIGINT, total DOUBLE, max_amount DOUBLE, avg_amount DOUBLE, "
               "price_sum DECIMAL(38, 2), first_ts TIMESTAMP(3), last_ts6 TIMESTAMP(6), last_day DATE",
    "by_bucket": "bucket BIGINT, even BOOLEAN, cnt BIGINT, min_ratio FLOAT, max_tiny TINYINT, "
                 "sum_small SMALLINT, sum_i INT, last_ltz TIMESTAMP_LTZ(3), min_tag STRING, max_t TIME(0)",
    "last": "k BIGINT, rk ROW<a INT, b STRING>, arr ARRAY<INT>, m MAP<STRING, BIGINT>, s STRING",
    "distincts": "bucket BIGINT, users BIGINT, tinies TINYINT, cnt BIGINT",
}


if __name__ == "__main__":
    main()
