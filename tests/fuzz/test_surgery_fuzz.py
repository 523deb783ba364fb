"""Writers and ``dispose`` on real runtime checkpoints, in the audited, limited child of the fuzz
suite (:mod:`fuzz_harness`):

* an unaligned checkpoint (in-flight records on a rebalance and a keyed exchange), valid and
  with its channel-state files damaged, through every writer: exit 0 only with an output that
  verifies and holds every in-flight record (nothing lost silently), else one line, exit 2,
  nothing written;
* a ``shared/`` that is a symbolic link to a user's folder, under a statekit incremental
  checkpoint and a Flink one: ``dispose`` refuses and the folder is untouched;
* concurrent outputs: two rescales to one ``-o`` (exactly one wins), and a folder appearing at
  ``-o`` just before the publication (kept; the command fails).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuzz_cases import encode_body, read_body, wrap_body
from fuzz_harness import (
    Command,
    Guarded,
    Outcome,
    RunDirs,
    audit_problems,
    check_run,
    report,
    run_child,
    system_roots,
)

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.runtime.connectors.sinks import CollectSink
from statekit.statefmt.json_contract import json_data

REPO = Path(__file__).resolve().parents[2]
N = 200_000
KEYS = 10


def _p(path: Path) -> str:
    return str(path)


# ----------------------------------------------------------------------------- snapshots from the runtime


class SlowSink(CollectSink):
    """0.2 ms a record: backpressure on the whole job, so unaligned barriers overtake records."""

    def invoke(self, value: Any) -> None:
        time.sleep(0.0002)


def _wait_for(handle: Any, count: int) -> None:
    deadline = time.monotonic() + 120
    try:
        while handle.checkpoint_stats()["counts"]["completed"] < count:
            assert not handle.status.is_terminal and time.monotonic() < deadline, handle.describe()
            time.sleep(0.02)
    finally:
        handle.cancel()
        handle.wait(60)


@pytest.fixture(scope="module")
def unaligned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A retained unaligned checkpoint holding in-flight records on both of its exchanges."""
    from statekit.runtime.api.functions import KeyedProcessFunction
    from statekit.runtime.api.state import ValueStateDescriptor
    from statekit.runtime.dataflow.environment import StreamEnvironment

    class Tally(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.total = ctx.get_state(ValueStateDescriptor("total", "int"))

        def process_element(self, value: int, ctx: Any, out: Any) -> None:
            self.total.update((self.total.value() or 0) + value)
            out.collect(value)

    root = tmp_path_factory.mktemp("fuzz-unaligned")
    env = StreamEnvironment().set_parallelism(2)
    env.set_checkpoint_storage(str(root))
    (env.from_sequence(1, N).uid("numbers").rebalance().map(lambda v: v, "relay").uid("relay")
        .key_by(lambda v: v % KEYS).process(Tally(), "tally").uid("tally").sink_to(SlowSink()).uid("sink"))
    env.enable_checkpointing(50, num_retained=5)
    env.enable_unaligned_checkpoints()
    _wait_for(env.execute_async("unaligned"), 4)
    (job,) = root.iterdir()
    for chk in sorted(job.glob("chk-*"), key=lambda p: -int(p.name[4:])):
        if (chk / "_metadata").exists() and len({f.path.split("/")[0] for f in SavepointReader.read(
                str(chk)).metadata.channel_files()}) >= 2:
            return chk
    raise AssertionError("no checkpoint holds in-flight records of two operators")


@pytest.fixture(scope="module")
def incremental(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job directory of a cancelled incremental RocksDB job (retained chk-N and shared/)."""
    from statekit.runtime.api.checkpoint_config import ExternalizedCheckpointCleanup
    from statekit.runtime.connectors.sinks import CollectSink
    from statekit.runtime.dataflow.environment import StreamEnvironment

    root = tmp_path_factory.mktemp("fuzz-incremental")
    env = StreamEnvironment().set_parallelism(2)
    env.set_checkpoint_storage(str(root))
    env.from_sequence(1, 50_000_000).uid("numbers").key_by(lambda v: v % KEYS).sum().uid("sums") \
        .sink_to(CollectSink()).uid("sink")
    env.set_state_backend("rocksdb", incremental=True)
    env.enable_checkpointing(20, num_retained=3,
                             externalized_cleanup=ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    _wait_for(env.execute_async("incremental"), 5)
    (job,) = root.iterdir()
    return job


def records_in_flight(path: Path | str) -> int:
    return sum(f.records for f in SavepointReader.read(str(path)).metadata.channel_files())


# ----------------------------------------------------------------------------- unaligned checkpoints through every writer

WRITES = ("outdir", "tmp")
WRITERS: tuple[tuple[Command, bool], ...] = (  # (command, whether it carries the records of a valid checkpoint)
    (Command("rescale-p3", lambda d: ["rescale", _p(d.snap), "-p", "3", "-o", _p(d.out)], writes=WRITES,
             produces_output=True), True),
    (Command("rescale-p1", lambda d: ["rescale", _p(d.snap), "-p", "1", "-o", _p(d.out)], writes=WRITES,
             produces_output=True), True),
    (Command("rescale-operator", lambda d: ["rescale", _p(d.snap), "--operator", "relay=3", "-o", _p(d.out)],
             writes=WRITES, produces_output=True), True),
    (Command("rescale-maxp256", lambda d: ["rescale", _p(d.snap), "--max-parallelism", "256", "-o", _p(d.out)],
             writes=WRITES, produces_output=True), False),
    (Command("migrate", lambda d: ["migrate", _p(d.snap), "--state", "tally/total", "--value-type", "long", "-o",
                                   _p(d.out)], writes=WRITES, produces_output=True), True),
    (Command("modify-rename", lambda d: ["modify", _p(d.snap), "--rename-uid", "tally=t2", "-o", _p(d.out)],
             writes=WRITES, produces_output=True), True),
    (Command("modify-remove-state", lambda d: ["modify", _p(d.snap), "--remove-state", "numbers/splits", "-o",
                                               _p(d.out)], writes=WRITES, produces_output=True), True),
    (Command("modify-remove-op", lambda d: ["modify", _p(d.snap), "--remove-operator", "tally", "-o", _p(d.out)],
             writes=WRITES, produces_output=True), False),
    (Command("bootstrap-from", lambda d: ["bootstrap", "--input", _p(d.other / "rows.csv"), "--uid", "extra",
                                          "--state", "n", "--key-column", "k", "--value-column", "n", "--from",
                                          _p(d.snap), "-o", _p(d.out)],
             reads=("snap", "shared", "other"), writes=WRITES, produces_output=True), True),
)


def _channel_file(dirs: RunDirs) -> Path:
    return sorted(dirs.snap.glob("*/_channel/*.skc"))[0]


def _flip(dirs: RunDirs) -> None:
    path = _channel_file(dirs)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(dirs: RunDirs) -> None:
    path = _channel_file(dirs)
    path.write_bytes(path.read_bytes()[:-7])


def _link_outside(dirs: RunDirs) -> None:
    path = _channel_file(dirs)
    copy = dirs.outside / "copy.skc"
    shutil.copyfile(path, copy)
    path.unlink()
    os.symlink(copy, path)


def _records_plus_one(dirs: RunDirs) -> None:
    body = read_body(dirs.snap)
    for op in body["operators"]:
        for st in op["subtasks"]:
            if st.get("channel_state"):
                st["channel_state"]["records"] += 1
                (dirs.snap / "_metadata").write_bytes(wrap_body(encode_body(body)))
                return


CHANNEL_MUTATIONS: dict[str, Callable[[RunDirs], None] | None] = {
    "valid": None,
    "channel-byte-flipped": _flip,
    "channel-truncated": _truncate,
    "channel-missing": lambda d: _channel_file(d).unlink(),
    "channel-symlink-outside": _link_outside,
    "channel-records-plus-one": _records_plus_one,
}


def _prepare(checkpoint: Path, mutation: Callable[[RunDirs], None] | None) -> Callable[[RunDirs], None]:
    def prepare(dirs: RunDirs) -> None:
        shutil.copytree(checkpoint, dirs.snap)
        dirs.shared.mkdir()
        dirs.canary.mkdir()
        (dirs.canary / "secret.txt").write_text("canary")
        dirs.outside.mkdir()
        (dirs.outside / "secret.txt").write_text("outside")
        dirs.other.mkdir(parents=True)
        (dirs.other / "rows.csv").write_text("k,n\na,1\nb,2\n")
        if mutation is not None:
            mutation(dirs)
    return prepare


def _surgery_run(case: str, command: Command, carries: bool, dirs: RunDirs, prepare: Callable[[RunDirs], None],
                 source_records: int) -> Outcome:
    prepare(dirs)
    guarded = Guarded.take(dirs)
    result = run_child(dirs, command.args(dirs), timeout_s=60)
    problems = check_run(dirs, command, result, guarded, system_roots())
    rc = result.returncode
    if case == "valid":
        if carries and rc != 0:
            problems.append(f"exit {rc}: a valid unaligned checkpoint must go through")
        if not carries and rc != 2:
            problems.append(f"exit {rc}: expected a one-line refusal (exit 2)")
    elif rc == 0:
        problems.append("exit 0 on damaged in-flight records (expected exit 2, nothing written)")
    if rc == 0 and not problems:
        verified = verify_snapshot(str(dirs.out))
        if not verified.ok:
            problems.append(f"the output fails verify: {json_data(verified)['problems'][:2]}")
        elif records_in_flight(dirs.out) != source_records:
            problems.append(f"in-flight records lost: {records_in_flight(dirs.out)} of {source_records} in the output")
    if not problems:
        shutil.rmtree(dirs.root, ignore_errors=True)
    return Outcome(case, case, command, result, problems, dirs.root)


@pytest.mark.parametrize("case", list(CHANNEL_MUTATIONS))
def test_unaligned_checkpoints_through_every_writer(case: str, unaligned: Path,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    from concurrent.futures import ThreadPoolExecutor

    source_records = records_in_flight(unaligned)
    assert source_records > 0
    prepare = _prepare(unaligned, CHANNEL_MUTATIONS[case])
    jobs = [(command, carries, RunDirs(tmp_path_factory.mktemp(f"{case}-{command.name}"), unaligned.name))
            for command, carries in WRITERS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(lambda job: _surgery_run(case, job[0], job[1], job[2], prepare, source_records), jobs))
    assert not any(o.failed for o in runs), report(runs)


# ----------------------------------------------------------------------------- a symlinked shared/

DISPOSE = Command("dispose", lambda d: ["dispose", _p(d.snap)], reads=("parent",), deletes=("snap",),
                  disposes=True)
DISPOSE_DRY = Command("dispose-dry-run", lambda d: ["dispose", "--dry-run", _p(d.snap)], reads=("parent",))


def _link_shared(dirs: RunDirs) -> None:
    """The job's shared/ becomes a link to the user's folder holding exactly its files."""
    user = dirs.outside / "user-documents"
    shutil.move(str(dirs.shared), user)
    (user / "taxes.pdf").write_bytes(b"%PDF precious")
    os.symlink(user, dirs.shared)


def _symlinked_runs(snapshot_name: str, prepare: Callable[[RunDirs], None],
                    tmp: pytest.TempPathFactory, case: str) -> list[Outcome]:
    outcomes = []
    for command in (DISPOSE_DRY, DISPOSE):
        dirs = RunDirs(tmp.mktemp(f"{case}-{command.name}"), snapshot_name)
        prepare(dirs)
        user_before = sorted(p.name for p in (dirs.outside / "user-documents").rglob("*"))
        guarded = Guarded.take(dirs)
        result = run_child(dirs, command.args(dirs), timeout_s=60)
        problems = check_run(dirs, command, result, guarded, system_roots())
        if result.returncode != 2 or "symbolic link" not in result.stderr:
            problems.append(f"exit {result.returncode}: expected a one-line refusal naming the symbolic link")
        if sorted(p.name for p in (dirs.outside / "user-documents").rglob("*")) != user_before:
            problems.append("the user's folder behind shared/ changed")
        outcomes.append(Outcome(case, "shared/ is a symbolic link to a user's folder", command, result, problems,
                                dirs.root))
    return outcomes


def test_a_symlinked_shared_folder_of_a_statekit_checkpoint(incremental: Path,
                                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    newest = max((p for p in incremental.glob("chk-*") if (p / "_metadata").exists()), key=lambda p: int(p.name[4:]))

    def prepare(dirs: RunDirs) -> None:
        # the job directory with only this checkpoint: every shared file it names is its own to delete
        dirs.parent.mkdir(parents=True)
        shutil.copytree(newest, dirs.snap)
        shutil.copytree(incremental / "shared", dirs.shared)
        dirs.canary.mkdir()
        dirs.outside.mkdir()
        _link_shared(dirs)

    runs = _symlinked_runs(newest.name, prepare, tmp_path_factory, "statekit-shared-link")
    assert not any(o.failed for o in runs), report(runs)


FLINK_INLINE0 = REPO / "tests" / "golden" / "flink-2.3" / "rocksdb-incremental-inline0" / "checkpoints"
FLINK_INLINE0_JOB = "41a19bb2434264c1a64f6d54dac65a72"
# where Flink wrote the golden checkpoint (tests/flink/conftest.py: GOLDEN.inline0_old_prefix)
FLINK_INLINE0_PREFIX = "file:/tmp/stackcheck/flink/out_rocksdb_noinline/checkpoints"


def test_a_symlinked_shared_folder_of_a_flink_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> None:
    from statekit.flink import relocate_flink_metadata

    def prepare(dirs: RunDirs) -> None:
        shutil.copytree(FLINK_INLINE0 / FLINK_INLINE0_JOB, dirs.parent, symlinks=True)
        meta = dirs.snap / "_metadata"
        meta.write_bytes(relocate_flink_metadata(meta.read_bytes(), f"{FLINK_INLINE0_PREFIX}/{FLINK_INLINE0_JOB}",
                                                 f"file:{dirs.parent}"))
        dirs.canary.mkdir()
        dirs.outside.mkdir()
        _link_shared(dirs)

    runs = _symlinked_runs("chk-4", prepare, tmp_path_factory, "flink-shared-link")
    assert not any(o.failed for o in runs), report(runs)


# ----------------------------------------------------------------------------- concurrent -o

RESCALE = Command("rescale", lambda d: [], writes=WRITES, produces_output=True)


def _valid_snapshot(dirs: RunDirs, checkpoint: Path) -> None:
    _prepare(checkpoint, None)(dirs)


def _rescale_into(results: dict[str, Any], name: str, dirs: RunDirs, parallelism: str, out: Path) -> None:
    results[name] = run_child(dirs, ["rescale", _p(dirs.snap), "-p", parallelism, "-o", _p(out)], timeout_s=60)


def test_two_rescales_to_one_output_never_both_succeed(unaligned: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    for round_ in range(4):
        first = RunDirs(tmp_path_factory.mktemp(f"concurrent-{round_}-a"), unaligned.name)
        second = RunDirs(tmp_path_factory.mktemp(f"concurrent-{round_}-b"), unaligned.name)
        for dirs in (first, second):
            _valid_snapshot(dirs, unaligned)
        results: dict[str, Any] = {}
        threads = [threading.Thread(target=_rescale_into, args=(results, "a", first, "3", first.out)),
                   threading.Thread(target=_rescale_into, args=(results, "b", second, "1", first.out))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r.returncode for r in results.values())
        assert codes == [0, 2], {k: (r.returncode, r.stderr) for k, r in results.items()}
        loser = next(r for r in results.values() if r.returncode == 2)
        assert len(loser.stderr.strip().splitlines()) == 1 and "Traceback" not in loser.stderr, loser.stderr
        assert "output" in loser.stderr
        assert verify_snapshot(str(first.out)).ok and records_in_flight(first.out) == records_in_flight(unaligned)
        left = [p for p in os.listdir(first.outdir) if p != "result"]
        assert not left, f"left beside the output: {left}"


RACE = """
import os, sys
from statekit.writers import staging
real = staging.publish_dir

def racing(staging_dir, claim):
    # someone creates the output folder, with a file of theirs, just before the publication
    os.makedirs(claim.path)
    with open(os.path.join(claim.path, "notes.txt"), "w") as f:
        f.write("mine")
    real(staging_dir, claim)

staging.publish_dir = racing
sys.argv = ["statekit", "rescale", {snap!r}, "-p", "3", "-o", {out!r}]
from statekit.cli.main import main
main()
"""


@pytest.mark.parametrize("publishing", ["renameat2", "lock and re-check"])
def test_a_folder_that_appears_at_the_output_is_kept(unaligned: Path, tmp_path_factory: pytest.TempPathFactory,
                                                     publishing: str) -> None:
    dirs = RunDirs(tmp_path_factory.mktemp(f"race-{publishing.split()[0]}"), unaligned.name)
    _valid_snapshot(dirs, unaligned)
    code = RACE.format(snap=str(dirs.snap), out=str(dirs.out))
    if publishing != "renameat2":
        code = code.replace("staging.publish_dir = racing", "staging.publish_dir = racing\nstaging._RENAMEAT2[:] = [None]")
        code = code.replace("real = staging.publish_dir", "real = staging.publish_dir\nstaging._renameat2()")
    guarded = Guarded.take(dirs)
    result = run_child(dirs, [], python_code=code, timeout_s=60)
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "appeared at the output" in lines[0], result.stderr
    assert sorted(os.listdir(dirs.outdir)) == ["result"] and (dirs.out / "notes.txt").read_text() == "mine"
    assert sorted(os.listdir(dirs.out)) == ["notes.txt"]
    from fuzz_harness import _policy

    assert audit_problems(result.events, _policy(dirs, RESCALE), system_roots()) == []
    assert Guarded.take(dirs).trees["parent"] == guarded.trees["parent"]
