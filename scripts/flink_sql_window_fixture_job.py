"""The Flink SQL window job behind tests/golden/flink-sql-window-2.3 (run by scripts/gen_flink_sql_window_fixtures.py).

Runs in the PyFlink virtualenv (scripts/install_pyflink.sh), never in statekit's own. The input
is a ``datagen`` sequence n = 0, 1, 2... (one source subtask, RATE rows a second, up to 9000: the job runs for a minute), with the event
time ``ts`` = BASE + min(n, N - 1) seconds and the watermark ``ts - 5 s``; the rows n >= N are
filtered out, so once the first N rows are in, the watermark stops at BASE + N - 1 - 5 seconds
(BASE + 594 s) and every window ending later stays open. Three window TVF aggregates (parallelism
2, max parallelism 128, one phase), each ``GROUP BY window_start, window_end, user_id`` over
``COUNT(*), SUM(n), MAX(amount DOUBLE), MIN(tag STRING)``, write into blackhole sinks:

    tumble:   TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE)
    hop:      HOP(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '3' MINUTE)
    cumulate: CUMULATE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '4' MINUTE)

The statements are compiled (``StatementSet.compilePlan``: the JSON ExecNode graph, written to
OUT/plan.json) and the job runs from that compiled plan, so its operators carry the plan's uids
(``<node id>_<transformation>``). Once the input is consumed the job waits for two more
checkpoints, takes the savepoints (the last one by stop-with-savepoint, the job stopping without
draining: its windows stay open).

Usage:  python flink_sql_window_fixture_job.py OUT BACKEND PLAN
    OUT      absolute directory: OUT/savepoints/savepoint-*, OUT/plan.json
    BACKEND  hashmap | rocksdb
    PLAN     comma-separated savepoints to take: canonical, native

Prints one JSON line "FIXTURE {...}" with the job id and the savepoint paths.
"""

import json
import os
import sys
import time

from flink_sql_job_support import latest_checkpoint as latest_retained
from flink_sql_job_support import minicluster_configuration, wait_for
from pyflink.common import Configuration
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment

N = 600
RATE = 150  # rows a second: the first N are in after 4 s
BASE = 1700000040000  # epoch ms, on a minute
OUT, BACKEND, PLAN = sys.argv[1], sys.argv[2], sys.argv[3].split(",")

EVENTS = f"""
CREATE TEMPORARY TABLE events (
  n BIGINT NOT NULL,
  ts AS CAST(TO_TIMESTAMP_LTZ({BASE} + LEAST(n, {N - 1}) * 1000, 3) AS TIMESTAMP(3)),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '{RATE}', 'scan.parallelism' = '1',
  'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '9000'
)
"""

CLICKS = f"""
CREATE TEMPORARY VIEW clicks AS SELECT
  n, ts, CONCAT('u', CAST(MOD(n, 5) AS STRING)) AS user_id, CAST(n AS DOUBLE) / 4 AS amount,
  CONCAT('t', CAST(n AS STRING)) AS tag
FROM events WHERE n < {N}
"""

WINDOWS = {
    "tumble": "TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE)",
    "hop": "HOP(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '3' MINUTE)",
    "cumulate": "CUMULATE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '4' MINUTE)",
}

QUERY = """
SELECT window_start, window_end, user_id, COUNT(*) AS cnt, SUM(n) AS total, MAX(amount) AS max_amount,
       MIN(tag) AS min_tag
FROM TABLE({window}) GROUP BY window_start, window_end, user_id
"""

SINK_COLUMNS = ("window_start TIMESTAMP(3), window_end TIMESTAMP(3), user_id STRING, cnt BIGINT, total BIGINT, "
                "max_amount DOUBLE, min_tag STRING")


def configuration() -> Configuration:
    return minicluster_configuration(OUT, BACKEND, {
        "table.optimizer.agg-phase-strategy": "ONE_PHASE",
    })


def latest_checkpoint(job_id: str) -> int:
    return latest_retained(OUT, job_id)


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment(configuration())
    t_env = StreamTableEnvironment.create(env)
    t_env.execute_sql(EVENTS)
    t_env.execute_sql(CLICKS)
    statements = t_env.create_statement_set()
    for name, window in WINDOWS.items():
        t_env.execute_sql(f"CREATE TEMPORARY TABLE {name}_sink ({SINK_COLUMNS}) WITH ('connector' = 'blackhole')")
        statements.add_insert_sql(f"INSERT INTO {name}_sink {QUERY.format(window=window)}")
    plan = statements._j_statement_set.compilePlan()
    with open(os.path.join(OUT, "plan.json"), "w") as out:
        out.write(plan.asJsonString())
    result = plan.execute()
    client = result.getJobClient().get()
    job_id = str(client.getJobID())
    print("job id", job_id, flush=True)
    wait_for(lambda: latest_checkpoint(job_id) >= 1, "the first checkpoint", timeout=120.0)
    time.sleep(N / RATE + 3)
    c0 = latest_checkpoint(job_id)
    wait_for(lambda: latest_checkpoint(job_id) >= c0 + 2, "a checkpoint of the frozen state", timeout=120.0)
    from pyflink.java_gateway import get_gateway

    formats = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType
    savepoints = {}
    for i, kind in enumerate(PLAN):
        fmt = formats.NATIVE if kind == "native" else formats.CANONICAL
        if i < len(PLAN) - 1:
            savepoints[kind] = client.triggerSavepoint(f"file://{OUT}/savepoints", fmt).get()
        else:  # stop without draining: no end-of-input watermark, the windows stay open
            savepoints[kind] = client.stopWithSavepoint(False, f"file://{OUT}/savepoints", fmt).get()
        print("savepoint", kind, savepoints[kind], flush=True)
    print("FIXTURE " + json.dumps({"job_id": job_id, "savepoints": savepoints, "n": N}), flush=True)


if __name__ == "__main__":
    main()
