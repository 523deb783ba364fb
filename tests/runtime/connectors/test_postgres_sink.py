"""PostgresSink against a real PostgreSQL server: exactly-once rows through SIGKILLs, a kill
between PREPARE and checkpoint completion, restores at other parallelisms and a server restart;
set-up errors (exit 2) and the sink's transaction handling driven by hand."""

from __future__ import annotations

import collections
import logging
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import chaos
import psycopg
import pytest
from chaos import (
    EXAMPLES,
    JobProcess,
    KillPlan,
    WordInput,
    checkpoint_in_progress,
    completed_checkpoints,
    every_attempt,
    finish,
    kill_repeatedly,
    latest_checkpoint,
    statekit_env,
)
from postgres_server import PostgresServer, find_postgres_bin
from sink_contexts import FakeRuntime, Snapshot, initialize, union_state

from statekit.runtime.connectors.postgres_sink import PENDING_TRANSACTIONS, PostgresSink, transaction_id
from statekit.statefmt.errors import BadInputError

WORDCOUNT_POSTGRES = str(EXAMPLES / "wordcount_postgres.py")
COLUMNS = {"word": "text", "count": "bigint"}
CHAOS_KILLS = 10


# ---------------------------------------------------------------- helpers


def new_job_id() -> str:
    """A fresh job id: prepared transaction ids are global to the server, shared by every test."""
    return uuid.uuid4().hex


def make_input(directory: Path, files: int, lines: int, seed: int) -> collections.Counter[str]:
    """``files`` files of ``lines`` lines of words; returns the true word counts."""
    return WordInput(files=files, lines=lines, seed=seed, vocabulary=800, extra_words=("Straße", "naïve"),
                     endings=("", "!", " 7")).write(directory)


def add_input(inputs: Path, number: int) -> collections.Counter[str]:
    """One more file of words in ``inputs`` (moved in whole, for a job that watches it); its word counts."""
    staging = inputs.parent / f"more-{number}"
    counts = make_input(staging, files=1, lines=2_000, seed=100 + number)
    (staging / "part-0.txt").rename(inputs / f"more-{number}.txt")
    staging.rmdir()
    return counts


def query(dsn: str, statement: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description is not None else []


def prepared(dsn: str) -> list[str]:
    """Global ids of the transactions prepared in the database of ``dsn``."""
    return [gid for (gid,) in query(dsn, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                                         "ORDER BY gid")]


def assert_exactly_once(dsn: str, expected: collections.Counter[str], table: str = "word_counts") -> None:
    got: dict[str, list[int]] = collections.defaultdict(list)
    for word, count in query(dsn, f"SELECT word, count FROM {table}"):
        got[word].append(count)
    chaos.assert_exactly_once(got, expected, what="rows")
    assert not prepared(dsn), "prepared transactions left on the server"


def job_command(job_file: str, checkpoints: Path, job_id: str, *, parallelism: int, restore: Path | None,
                interval: str = "150ms", executor: str = "auto") -> list[str]:
    """``statekit run`` of ``job_file`` (its arguments go after it)."""
    options = ["-p", str(parallelism), "--checkpoint-dir", str(checkpoints), "--checkpoint-interval", interval,
               "--job-id", job_id, "--executor", executor, *(["-s", str(restore)] if restore is not None else [])]
    return chaos.statekit_run(job_file, options)


def wordcount_args(inputs: Path, dsn: str, *, watch: bool = False) -> list[str]:
    """The job's arguments; ``watch``: it never ends on its own (an attempt the test kills must
    not finish its input first, however fast the machine)."""
    return ["--input", str(inputs), "--dsn", dsn, *(["--watch"] if watch else [])]


# ---------------------------------------------------------------- crashes and restores


def latest_over(checkpoints: Path) -> Path | None:
    """The latest complete checkpoint over every job directory under ``checkpoints`` (by id, then age)."""
    found = [(int(e.name[4:]), e.stat().st_mtime, e) for job in (checkpoints.iterdir() if checkpoints.is_dir() else [])
             for e in job.glob("chk-*") if (e / "_metadata").exists()]
    return max(found)[2] if found else None


def test_wordcount_postgres_is_exactly_once_under_sigkill(tmp_path: Path, postgres_dsn: str) -> None:
    """As a user runs it: every attempt is a new job (a new job id) restored from the latest complete
    checkpoint of any earlier one, SIGKILLed at a random moment, while a checkpoint is being taken
    (between PREPARE and completion), or — every third, given a new input file — right after it
    prepared its first transaction (it completes no checkpoint: the next attempt restores the same
    one). No prepared transaction of any of them is left in the end."""
    expected = make_input(tmp_path / "in", files=8, lines=14_000, seed=5)
    checkpoints, home = tmp_path / "chk", tmp_path / "home"
    rng = random.Random(17)
    restored: list[int] = []
    for attempt in range(CHAOS_KILLS):
        job = new_job_id()
        job_dir = checkpoints / job
        source = latest_over(checkpoints)
        restored.append(int(source.name[4:]) if source else 0)
        command = job_command(WORDCOUNT_POSTGRES, checkpoints, job, parallelism=2, restore=source, interval="50ms")
        if attempt % 3 == 2:  # new words, so that this attempt has a transaction to prepare however far the others got
            expected.update(add_input(tmp_path / "in", attempt))
        with JobProcess([*command, *wordcount_args(tmp_path / "in", postgres_dsn, watch=True)], home=home) as process:
            if attempt % 3 == 2:  # killed once it prepared its first transaction, before it completes
                before = set(prepared(postgres_dsn))
                process.wait_for(lambda before=before: bool(set(prepared(postgres_dsn)) - before),
                                 "its first prepared transaction", timeout=60)
            else:  # one checkpoint of its own, so the chain makes progress; then a kill at a random moment
                process.wait_for(lambda job_dir=job_dir: latest_checkpoint(job_dir) > 0, "a checkpoint", timeout=120)
                if attempt % 2:
                    process.wait_for(lambda job_dir=job_dir: checkpoint_in_progress(job_dir),
                                     "a checkpoint in progress", timeout=5)
                else:
                    time.sleep(rng.uniform(0, 0.15))
            process.kill()
    final = job_command(WORDCOUNT_POSTGRES, checkpoints, new_job_id(), parallelism=2, restore=latest_over(checkpoints))
    finish([*final, *wordcount_args(tmp_path / "in", postgres_dsn)], home=home, timeout=180)
    assert restored == sorted(restored) and len(set(restored)) >= CHAOS_KILLS // 2, restored
    assert_exactly_once(postgres_dsn, expected)


KILL_JOB = '''
"""wordcount_postgres whose sink SIGKILLs the process on subtask 0 at checkpoint >= 2:
after PREPARE (mode prepared) or on completion before COMMIT PREPARED (mode completed)."""
import importlib.util, os, signal, sys

from statekit.runtime.dataflow.environment import get_execution_environment
from statekit.runtime.connectors.postgres_sink import PostgresSink
from statekit.runtime.connectors.sources import FileSource

spec = importlib.util.spec_from_file_location("wcp", {example!r})
wcp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wcp)
wc = wcp.wordcount()
MODE = sys.argv[3]


class KillingSink(PostgresSink):
    def pre_commit(self, txn, checkpoint_id):
        super().pre_commit(txn, checkpoint_id)
        if MODE == "prepared" and checkpoint_id >= 2 and self.subtask == 0:
            os.kill(os.getpid(), signal.SIGKILL)

    def notify_checkpoint_complete(self, checkpoint_id):
        if MODE == "completed" and checkpoint_id >= 2 and self.subtask == 0 and self.pending_transactions:
            os.kill(os.getpid(), signal.SIGKILL)
        super().notify_checkpoint_complete(checkpoint_id)


env = get_execution_environment()
(env.from_source(FileSource(sys.argv[1]), "files").uid("source")
    .flat_map(wc.tokenize, "tokenize").uid("tokenize")
    .key_by(lambda word: word)
    .process(wc.CountWords(), "count words").uid("counter")
    .sink_to(KillingSink(sys.argv[2], "word_counts", wcp.COLUMNS, create_table=True), "word counts").uid("sink"))
env.execute("killed between prepare and completion")
'''


@pytest.mark.parametrize(("mode", "restore_as"), [("prepared", "another job"), ("completed", "the same job")])
def test_a_kill_between_prepare_and_completion_is_resolved_on_restore(
    tmp_path: Path, postgres_dsn: str, mode: str, restore_as: str
) -> None:
    job = new_job_id()
    expected = make_input(tmp_path / "in", files=4, lines=6000, seed=9)
    job_file = tmp_path / "killing_job.py"
    job_file.write_text(KILL_JOB.format(example=WORDCOUNT_POSTGRES), encoding="utf-8")
    checkpoints, job_dir = tmp_path / "chk", tmp_path / "chk" / job
    # on threads: the sink's SIGKILL kills the whole job process (on TaskManagers it would kill one
    # TaskManager and fail over: tests/runtime/taskmanager/ covers that)
    killed = subprocess.run([*job_command(str(job_file), checkpoints, job, parallelism=2, restore=None, interval="100ms",
                                          executor="threads"),
                             str(tmp_path / "in"), postgres_dsn, mode], capture_output=True, text=True, timeout=120,
                            env=statekit_env(tmp_path / "home"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    left = [int(g.rsplit(":", 1)[1]) for g in prepared(postgres_dsn) if g.startswith(f"statekit:{job}:sink:0:")]
    latest = completed_checkpoints(job_dir)[-1]
    assert left, prepared(postgres_dsn)
    if mode == "prepared":  # prepared at a checkpoint that never completed: the snapshot does not know it
        assert max(left) > latest
    else:  # prepared at a checkpoint that completed (so the snapshot lists it), never committed
        assert min(left) <= latest and latest >= 2
    visible_before = query(postgres_dsn, "SELECT count(*) FROM word_counts")[0][0]

    restore_job = job if restore_as == "the same job" else new_job_id()
    command = job_command(WORDCOUNT_POSTGRES, checkpoints, restore_job, parallelism=2, restore=job_dir / f"chk-{latest}")
    finish([*command, *wordcount_args(tmp_path / "in", postgres_dsn)], home=tmp_path / "home", timeout=180)
    assert_exactly_once(postgres_dsn, expected)
    assert visible_before > 0


def test_restores_at_other_parallelisms_stay_exactly_once(tmp_path: Path, postgres_dsn: str) -> None:
    expected = make_input(tmp_path / "in", files=8, lines=25_000, seed=13)
    job = new_job_id()
    checkpoints, job_dir, home = tmp_path / "chk", tmp_path / "chk" / job, tmp_path / "home"
    # at parallelism 2, then 3: two checkpoints of its own, then a kill while a checkpoint is being taken
    plan = KillPlan(attempts=2, seed=0, checkpoints=2, mid_checkpoint=every_attempt, mid_checkpoint_wait_s=5,
                    mid_checkpoint_required=True)
    kill_repeatedly(job_dir, lambda attempt: [
        *job_command(WORDCOUNT_POSTGRES, checkpoints, job, parallelism=(2, 3)[attempt],
                     restore=job_dir if latest_checkpoint(job_dir) else None, interval="50ms"),
        *wordcount_args(tmp_path / "in", postgres_dsn, watch=True)], plan, home=home)
    finish([*job_command(WORDCOUNT_POSTGRES, checkpoints, job, parallelism=1, restore=job_dir),
            *wordcount_args(tmp_path / "in", postgres_dsn)], home=home, timeout=180)
    assert_exactly_once(postgres_dsn, expected)


def test_a_server_restart_mid_job_fails_over_without_duplicates(
    tmp_path: Path, postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    expected = make_input(tmp_path / "in", files=8, lines=30_000, seed=21)
    job = new_job_id()
    checkpoints, job_dir = tmp_path / "chk", tmp_path / "chk" / job
    command = job_command(WORDCOUNT_POSTGRES, checkpoints, job, parallelism=2, restore=None, interval="100ms")
    with JobProcess([*command, *wordcount_args(tmp_path / "in", postgres_dsn)], home=tmp_path / "home") as job_process:
        job_process.wait_for(lambda: latest_checkpoint(job_dir) >= 2, "two checkpoints", 30)
        rows_before = query(postgres_dsn, "SELECT count(*) FROM word_counts")[0][0]
        postgres_server.restart(down_s=0.3)
        _, stderr = job_process.process.communicate(timeout=180)
    assert job_process.process.returncode == 0, stderr
    assert "restart 1 of 3" in stderr, stderr
    assert 0 < rows_before < sum(expected.values())
    assert_exactly_once(postgres_dsn, expected)


SOAK_ATTEMPTS = int(os.environ.get("STATEKIT_PG_SOAK", "0"))


@pytest.mark.slow
@pytest.mark.skipif(SOAK_ATTEMPTS <= 0, reason="set STATEKIT_PG_SOAK=N (attempts, e.g. 24) to run")
def test_soak_sigkills_rescales_and_server_crashes(
    tmp_path: Path, postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    """N attempts at parallelism 2, 3, 1, 4, ...: each is SIGKILLed (at random or mid-checkpoint),
    every fourth after the server crashed (SIGQUIT) and came back while it ran."""
    expected = make_input(tmp_path / "in", files=12, lines=8 * SOAK_ATTEMPTS * 300, seed=99)
    job = new_job_id()
    checkpoints, job_dir, home = tmp_path / "chk", tmp_path / "chk" / job, tmp_path / "home"
    crashes = 0

    def crash_the_server(job_process: JobProcess, attempt: int) -> None:
        nonlocal crashes
        if attempt % 4 == 3:
            postgres_server.stop("immediate")
            postgres_server.start()
            crashes += 1
            after = latest_checkpoint(job_dir)
            job_process.wait_for(lambda: latest_checkpoint(job_dir) > after, "a checkpoint after the crash", 60)

    plan = KillPlan(attempts=SOAK_ATTEMPTS, seed=23, checkpoint_timeout_s=60, random_delay_s=0.15,
                    mid_checkpoint=lambda _, rng: rng.random() < 0.5, mid_checkpoint_wait_s=5,
                    mid_checkpoint_required=True)
    kill_repeatedly(job_dir, lambda attempt: [
        *job_command(WORDCOUNT_POSTGRES, checkpoints, job, parallelism=(2, 3, 1, 4)[attempt % 4],
                     restore=job_dir if latest_checkpoint(job_dir) else None, interval="50ms"),
        *wordcount_args(tmp_path / "in", postgres_dsn, watch=True)], plan, home=home, during=crash_the_server)
    finish([*job_command(WORDCOUNT_POSTGRES, checkpoints, job, parallelism=2, restore=job_dir),
            *wordcount_args(tmp_path / "in", postgres_dsn)], home=home, timeout=180)
    assert crashes == SOAK_ATTEMPTS // 4
    assert_exactly_once(postgres_dsn, expected)


# ---------------------------------------------------------------- set-up errors (exit 2)


def statekit_run(tmp_path: Path, dsn: str, parallelism: int) -> subprocess.CompletedProcess[str]:
    """``statekit run -p N examples/wordcount_postgres.py`` on a one-line input, as a user runs it."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("one two\n", encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "statekit.cli.main", "run", "-p", str(parallelism),
                           WORDCOUNT_POSTGRES, *wordcount_args(tmp_path / "in", dsn)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "STATEKIT_HOME": str(tmp_path / "home")})


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one-line error ``statekit run`` ends with (task failures are logged above it)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("statekit: error: "), done.stderr
    return last


def test_max_prepared_transactions_0_is_refused_with_exit_2(tmp_path: Path) -> None:
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found")
    server = PostgresServer(bin_dir, settings={"max_prepared_transactions": "0"})
    try:
        server.start()
        done = statekit_run(tmp_path, server.dsn(), parallelism=1)
    finally:
        server.close()
    assert error_line(done) == (
        f"statekit: error: postgresql://127.0.0.1:{server.port}/postgres table word_counts: the server has "
        "max_prepared_transactions = 0, so PREPARE TRANSACTION is disabled; PostgresSink needs two-phase commit: "
        "set max_prepared_transactions to at least 2 x the sink's parallelism in postgresql.conf and restart "
        "the server")


def test_a_table_that_does_not_match_is_refused_with_exit_2(tmp_path: Path, postgres_dsn: str) -> None:
    query(postgres_dsn, "CREATE TABLE word_counts (word text, count integer, id bigint NOT NULL)")
    line = error_line(statekit_run(tmp_path, postgres_dsn, parallelism=2))
    assert line.endswith("table word_counts: the table does not match the sink's columns (word text, count bigint): "
                         "column 'count' is integer, the sink writes bigint; "
                         "column 'id' is NOT NULL without a default and the sink does not write it"), line
    assert query(postgres_dsn, "SELECT count(*) FROM word_counts") == [(0,)]


@pytest.mark.parametrize(("prepare", "sink_args", "message"), [
    (None, {}, r"table word_counts: the table does not exist; create it with columns \(word text, count bigint\) "
               "or pass create_table=True"),
    ("CREATE VIEW word_counts AS SELECT 'a'::text AS word, 1::bigint AS count", {},
     r"the table does not match .*: it is not a table \(relkind v\)"),
    ("CREATE TABLE word_counts (word text)", {"create_table": True}, r"does not match .*: no column 'count'"),
    (None, {"columns": {"word": "text", "count": "no_such_type"}},
     r"column 'count' has an unknown type 'no_such_type'"),
])
def test_set_up_errors_are_bad_input(postgres_dsn: str, prepare: str | None, sink_args: dict[str, Any],
                                     message: str) -> None:
    if prepare:
        query(postgres_dsn, prepare)
    sink = PostgresSink(postgres_dsn, "word_counts", sink_args.pop("columns", COLUMNS), **sink_args)
    with pytest.raises(BadInputError, match=message) as error:
        initialize(sink, PENDING_TRANSACTIONS)
    assert error.value.exit_code == 2
    sink.close()


def test_an_invalid_dsn_or_a_missing_psycopg_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BadInputError, match='invalid connection string: .*invalid connection option "bogus"'):
        initialize(PostgresSink("bogus=1", "t", COLUMNS), PENDING_TRANSACTIONS)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(BadInputError, match=r"pip install 'statekit\[postgres\]'"):
        initialize(PostgresSink("host=x", "t", COLUMNS), PENDING_TRANSACTIONS)


# ---------------------------------------------------------------- transactions by hand


def sink_for(dsn: str, job: str, *, uid: str = "sink", subtask: int = 0, parallelism: int = 1,
             restored: list[Any] | None = None) -> tuple[PostgresSink, Any]:
    sink = PostgresSink(dsn, "word_counts", COLUMNS, create_table=True)
    store = initialize(sink, PENDING_TRANSACTIONS, restored=restored,
                       runtime=FakeRuntime(subtask, parallelism, job=job, uid=uid))
    return sink, store


def test_pre_commit_prepares_under_the_global_id_and_commit_is_idempotent(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = new_job_id()
    sink, store = sink_for(postgres_dsn, job, subtask=1, parallelism=2)
    for i in range(1, 1001):
        sink(("w", i))
    sink.snapshot_state(Snapshot(4))
    gid = transaction_id(job, "sink", 1, 4)
    assert gid == f"statekit:{job}:sink:1:4"
    assert prepared(postgres_dsn) == [gid]
    assert query(postgres_dsn, "SELECT count(*) FROM word_counts") == [(0,)]  # prepared rows are invisible
    (entry, open_entry) = union_state(store)
    assert entry["checkpoint"] == 4 and entry["gid"] == gid and entry["job"] == job and entry["xid"] > 0
    assert open_entry == {"checkpoint": None, "job": job, "subtask": 1, "gid": None, "xid": None}
    with caplog.at_level(logging.WARNING):
        sink.notify_checkpoint_complete(4)
        (txn, _) = sink.restore_transaction(entry)
        sink.commit(txn)  # already committed: no error, no warning
    assert not caplog.records
    assert query(postgres_dsn, "SELECT count(*), max(count) FROM word_counts") == [(1000, 1000)]
    sink.close()


def test_a_prepared_transaction_rolled_back_by_someone_else_is_reported_on_commit(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = new_job_id()
    sink, _ = sink_for(postgres_dsn, job)
    sink(("w", 1))
    sink.snapshot_state(Snapshot(1))
    query(postgres_dsn, f"ROLLBACK PREPARED '{transaction_id(job, 'sink', 0, 1)}'")
    with caplog.at_level(logging.WARNING):
        sink.notify_checkpoint_complete(1)
    assert "is gone and was never committed (server says: aborted); its rows are lost" in caplog.text
    sink.close()


def test_close_rolls_back_the_open_transaction_and_keeps_prepared_ones(postgres_dsn: str) -> None:
    job = new_job_id()
    sink, _ = sink_for(postgres_dsn, job)
    sink(("prepared", 1))
    sink.snapshot_state(Snapshot(1))
    sink(("open", 1))
    sink.close()
    assert prepared(postgres_dsn) == [transaction_id(job, "sink", 0, 1)]
    assert query(postgres_dsn, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                               "AND pid <> pg_backend_pid()") == [(0,)]
    query(postgres_dsn, f"COMMIT PREPARED '{transaction_id(job, 'sink', 0, 1)}'")
    assert query(postgres_dsn, "SELECT word FROM word_counts") == [("prepared",)]


def test_recovery_commits_the_snapshot_and_rolls_back_only_this_sinks_leftovers(postgres_dsn: str) -> None:
    job, other, current = new_job_id(), new_job_id(), new_job_id()
    old, old_store = sink_for(postgres_dsn, job, subtask=0, parallelism=2)
    old(("known", 1))
    old.snapshot_state(Snapshot(3))  # in the snapshot restored below
    snapshot = union_state(old_store)
    old(("unknown", 1))
    old.snapshot_state(Snapshot(4))  # prepared after it
    other_uid, _ = sink_for(postgres_dsn, job, uid="sink:1")  # extends the uid: must survive
    other_uid(("other uid", 1))
    other_uid.snapshot_state(Snapshot(4))
    other_job, _ = sink_for(postgres_dsn, other)  # neither the snapshot's nor the current job
    other_job(("other job", 1))
    other_job.snapshot_state(Snapshot(4))
    for sink in (old, other_uid, other_job):
        sink.close()
    assert len(prepared(postgres_dsn)) == 4

    survivors = sorted([transaction_id(job, "sink:1", 0, 4), transaction_id(other, "sink", 0, 4)])
    restored, _ = sink_for(postgres_dsn, current, subtask=0, parallelism=3, restored=snapshot)
    assert query(postgres_dsn, "SELECT word FROM word_counts") == [("known",)]
    assert prepared(postgres_dsn) == survivors
    restored.close()
    again, _ = sink_for(postgres_dsn, current, subtask=0, parallelism=3, restored=snapshot)  # idempotent
    assert query(postgres_dsn, "SELECT word FROM word_counts") == [("known",)]
    assert prepared(postgres_dsn) == survivors
    again.close()
    for gid in survivors:
        query(postgres_dsn, f"ROLLBACK PREPARED '{gid}'")


def test_recovery_rolls_back_what_a_sibling_restore_prepared_and_never_completed(postgres_dsn: str) -> None:
    """A restored from its checkpoint 3 by B (killed after preparing 4, no checkpoint of its own),
    then by C from the same checkpoint: C rolls back what B prepared, C's successors the same."""
    a, b, c = new_job_id(), new_job_id(), new_job_id()
    first, store = sink_for(postgres_dsn, a)
    first(("kept", 1))
    first.snapshot_state(Snapshot(3))
    snapshot = union_state(store)
    first(("lost", 1))
    first.snapshot_state(Snapshot(4))  # prepared, never completed: the job dies
    first.close()
    sibling, _ = sink_for(postgres_dsn, b, restored=snapshot)
    assert prepared(postgres_dsn) == []  # A's leftover rolled back, the snapshot's committed
    sibling(("lost", 1))
    sibling.snapshot_state(Snapshot(4))  # prepared by B, which is killed before 4 completes
    sibling.close()
    assert prepared(postgres_dsn) == [transaction_id(a, "sink", 0, 4)]  # B continues A's lineage

    restored, store_c = sink_for(postgres_dsn, c, restored=snapshot)
    assert prepared(postgres_dsn) == [] and query(postgres_dsn, "SELECT word FROM word_counts") == [("kept",)]
    restored(("new", 1))
    restored.snapshot_state(Snapshot(4))
    assert union_state(store_c)[0]["job"] == a
    restored.notify_checkpoint_complete(4)
    restored.close()
    assert prepared(postgres_dsn) == []
    assert sorted(query(postgres_dsn, "SELECT word FROM word_counts")) == [("kept",), ("new",)]


def test_a_restored_lineage_that_is_not_a_job_id_is_ignored(postgres_dsn: str) -> None:
    job = new_job_id()
    odd = [{"checkpoint": None, "job": "x'; DROP TABLE word_counts; --", "subtask": 0, "gid": None, "xid": None}]
    sink, _ = sink_for(postgres_dsn, job, restored=odd)
    sink(("w", 1))
    sink.snapshot_state(Snapshot(2))
    assert prepared(postgres_dsn) == [transaction_id(job, "sink", 0, 2)]
    sink.notify_checkpoint_complete(2)
    sink.close()
