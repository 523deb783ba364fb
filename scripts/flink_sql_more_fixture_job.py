"""The PyFlink SQL job behind tests/golden/flink-sql-ops-2.3 (run by scripts/gen_flink_sql_more_fixtures.py).

Runs in the PyFlink virtualenv (scripts/install_pyflink.sh), never in statekit's own. The input
is the numbers 0..N-1 (NumberSequenceSource, endless, throttled past N, the rest filtered out),
turned into a table ``events`` by SQL expressions of n with a processing-time attribute ``pt``
and an event-time attribute ``rt`` (n seconds after 2023-11-14T22:13:20, the watermark 99
days behind it: no event-time timer ever fires and no row is ever late). Every operator upstream
of the keyed exchanges runs at parallelism 1, so each key sees its rows in input order. Keyed
operators run at parallelism 2 (max parallelism 128) and write into blackhole sinks:

    dedup_first     ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY pt) = 1  (proctime, keep first)
    dedup_last      ROW_NUMBER() OVER (PARTITION BY bucket ORDER BY pt DESC) = 1  (proctime, keep last)
    dedup_rt_first  ROW_NUMBER() OVER (PARTITION BY k9 ORDER BY rt) = 1  (rowtime, keep first)
    dedup_rt_last   ROW_NUMBER() OVER (PARTITION BY k9 ORDER BY rt DESC) = 1  (rowtime, keep last)
    topn_append     top 3 per bucket by amount DESC over the append-only input
    topn_retract    top 3 per bucket by c ASC over per_user (an updating COUNT(*) per bucket, user_id)
    topn_update     top 3 per bucket by c DESC, user_id over per_user (updates, unique key)
    join_nokey      LEFT JOIN of two append-only inputs without unique keys (duplicate rows)
    join_unique     LEFT JOIN of two GROUP BY results on their grouping key
    join_uk         LEFT JOIN of two GROUP BY results on part of their grouping keys
    interval_join   FULL JOIN on k AND l.rt BETWEEN r.rt - 2 s AND r.rt + 2 s  (rowtime)

Once the input is consumed the state is frozen; the job waits for two more checkpoints, takes
the savepoints and is cancelled.

Usage:  python flink_sql_more_fixture_job.py OUT BACKEND PLAN [QUERIES]
    OUT      absolute directory: OUT/savepoints/savepoint-*
    BACKEND  hashmap | rocksdb
    PLAN     comma-separated savepoints to take: canonical, native
    QUERIES  comma-separated names of the queries to run (default all, in the order below)

Prints one JSON line "FIXTURE {...}" with the job id and the savepoint paths.
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
from pyflink.table import DataTypes, Schema, StreamTableEnvironment

N = 2000
OUT, BACKEND, PLAN = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
MARKER = os.path.join(OUT, "input-consumed")
ONLY = sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else None

EVENTS = """
CREATE TEMPORARY VIEW events AS SELECT
  n,
  CONCAT('u', CAST(MOD(n, 50) AS STRING)) AS user_id,
  CAST(MOD(n, 7) AS INT) AS bucket,
  CAST(MOD(n, 9) AS INT) AS k9,
  MOD(n, 2) = 0 AS even,
  CAST(n AS DOUBLE) / 8 AS amount,
  CAST(MOD(n, 100) AS TINYINT) AS tiny,
  CONCAT('tag-', CAST(n AS STRING)) AS tag,
  pt, rt
FROM numbers
"""

QUERIES = {
    "dedup_first": """
SELECT n, user_id FROM (
  SELECT n, user_id, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY pt) AS rn FROM events)
WHERE rn = 1""",
    "dedup_last": """
SELECT n, bucket, tag FROM (
  SELECT n, bucket, tag, ROW_NUMBER() OVER (PARTITION BY bucket ORDER BY pt DESC) AS rn FROM events)
WHERE rn = 1""",
    "dedup_rt_first": """
SELECT n, k9, amount, rt FROM (
  SELECT n, k9, amount, rt, ROW_NUMBER() OVER (PARTITION BY k9 ORDER BY rt) AS rn FROM events)
WHERE rn = 1""",
    "dedup_rt_last": """
SELECT n, k9, tag, rt FROM (
  SELECT n, k9, tag, rt, ROW_NUMBER() OVER (PARTITION BY k9 ORDER BY rt DESC) AS rn FROM events)
WHERE rn = 1""",
    "topn_append": """
SELECT bucket, n, amount, rk FROM (
  SELECT bucket, n, amount, ROW_NUMBER() OVER (PARTITION BY bucket ORDER BY amount DESC) AS rk FROM events)
WHERE rk <= 3""",
    "topn_retract": """
SELECT bucket, user_id, c, rk FROM (
  SELECT bucket, user_id, c, ROW_NUMBER() OVER (PARTITION BY bucket ORDER BY c ASC) AS rk FROM per_user)
WHERE rk <= 3""",
    "topn_update": """
SELECT bucket, user_id, c, rk FROM (
  SELECT bucket, user_id, c, ROW_NUMBER() OVER (PARTITION BY bucket ORDER BY c DESC, user_id) AS rk
  FROM per_user)
WHERE rk <= 3""",
    "join_nokey": """
SELECT l.j, l.v, r.w FROM
  (SELECT CAST(MOD(n, 50) AS INT) AS j, CAST(MOD(n, 7) AS INT) AS v FROM events WHERE even) l
LEFT JOIN
  (SELECT CAST(MOD(n + 1, 40) AS INT) AS j, CAST(MOD(n, 3) AS INT) AS w FROM events WHERE NOT even) r
ON l.j = r.j""",
    "join_unique": """
SELECT l.user_id, l.c, r.m FROM
  (SELECT user_id, COUNT(*) AS c FROM events GROUP BY user_id) l
LEFT JOIN
  (SELECT user_id, MAX(n) AS m FROM events WHERE n < 175 AND bucket = 0 GROUP BY user_id) r
ON l.user_id = r.user_id""",
    "join_uk": """
SELECT l.bucket, l.even, l.c, r.tiny, r.s FROM
  (SELECT bucket, even, COUNT(*) AS c FROM events GROUP BY bucket, even) l
LEFT JOIN
  (SELECT bucket, tiny, SUM(amount) AS s FROM events WHERE n < 40 AND bucket < 5 GROUP BY bucket, tiny) r
ON l.bucket = r.bucket""",
    "interval_join": """
SELECT l.n, r.n FROM
  (SELECT n, CAST(MOD(n / 10, 5) AS INT) AS k, rt FROM events WHERE even) l
FULL JOIN
  (SELECT n, CAST(MOD(n / 10, 5) AS INT) AS k, rt FROM events WHERE NOT even AND MOD(n, 3) = 0) r
ON l.k = r.k AND l.rt BETWEEN r.rt - INTERVAL '2' SECOND AND r.rt + INTERVAL '2' SECOND""",
}

SINK_COLUMNS = {
    "dedup_first": "n BIGINT, user_id STRING",
    "dedup_last": "n BIGINT, bucket INT, tag STRING",
    "dedup_rt_first": "n BIGINT, k9 INT, amount DOUBLE, rt TIMESTAMP(3)",
    "dedup_rt_last": "n BIGINT, k9 INT, tag STRING, rt TIMESTAMP(3)",
    "topn_append": "bucket INT, n BIGINT, amount DOUBLE, rk BIGINT",
    "topn_retract": "bucket INT, user_id STRING, c BIGINT, rk BIGINT",
    "topn_update": "bucket INT, user_id STRING, c BIGINT, rk BIGINT",
    "join_nokey": "j INT, v INT, w INT",
    "join_unique": "user_id STRING, c BIGINT, m BIGINT",
    "join_uk": "bucket INT, even BOOLEAN, c BIGINT, tiny TINYINT, s DOUBLE",
    "interval_join": "l_n BIGINT, r_n BIGINT",
}


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
        "python.fn-execution.bundle.size": "100",
        "python.fn-execution.bundle.time": "100",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
    })


def latest_checkpoint(job_id: str) -> int:
    return latest_retained(OUT, job_id)


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment(configuration())
    t_env = StreamTableEnvironment.create(env)
    numbers = (env.from_source(NumberSequenceSource(0, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
               .set_parallelism(1).uid("numbers")
               .map(throttle, output_type=Types.LONG()).set_parallelism(1).uid("throttle")
               .filter(lambda n: n < N).set_parallelism(1).uid("first-n"))
    schema = (Schema.new_builder()
              .column("f0", DataTypes.BIGINT())
              .column_by_expression("pt", "PROCTIME()")
              .column_by_expression("rt", "CAST(TO_TIMESTAMP_LTZ(1700000000000 + f0 * 1000, 3) AS TIMESTAMP(3))")
              .watermark("rt", "rt - INTERVAL '99' DAY")
              .build())
    t_env.create_temporary_view("raw_numbers", t_env.from_data_stream(numbers, schema))
    t_env.execute_sql("CREATE TEMPORARY VIEW numbers AS SELECT f0 AS n, pt, rt FROM raw_numbers")
    t_env.execute_sql(EVENTS)
    t_env.execute_sql("CREATE TEMPORARY VIEW per_user AS SELECT bucket, user_id, COUNT(*) AS c FROM events "
                      "GROUP BY bucket, user_id")
    statements = t_env.create_statement_set()
    for name, query in QUERIES.items():
        if ONLY is not None and name not in ONLY:
            continue
        t_env.execute_sql(f"CREATE TEMPORARY TABLE {name}_sink ({SINK_COLUMNS[name]}) WITH ('connector' = 'blackhole')")
        statements.add_insert_sql(f"INSERT INTO {name}_sink {query}")
    client = statements.execute().get_job_client()
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
    print("FIXTURE " + json.dumps({"job_id": job_id, "savepoints": savepoints, "n": N}), flush=True)


if __name__ == "__main__":
    main()
