"""Native RocksDB state decoded without a JVM, on snapshots written by real PyFlink 2.3 and 1.20.

The job (scripts/flink_fixture_job.py) feeds n = 0 .. 2999 once each: operator ``profile``
keys by ``key-<n % 1000>``, so key ``key-i`` saw i, i + 1000 and i + 2000 in that order;
operator ``sparse`` keys by ``n % 40``. Every value below follows from that, and from the
PyFlink type of each state: a check that every byte was decoded by the right rule.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from statekit.flink import open_flink_snapshot
from statekit.flink.entries import FlinkKeyedEntry, decodable_states, read_keyed_state
from statekit.flink.model import (
    KeyedHandleKind,
    KeyedStateHandle,
    KeyGroupRange,
    NamedStreamHandle,
    StreamHandle,
    StreamHandleKind,
)
from statekit.flink.rocksdb import TEMP_PREFIX, materialized_rocksdb
from statekit.statefmt.errors import BadInputError, CorruptStateError, UnsafePathError

FAR_FUTURE = 4102444800000
UIDS = ("numbers", "throttle", "profile", "sparse")
VALUE_TYPES = {
    "python-state-count": "int", "python-state-name": "string", "python-state-ratio": "double",
    "python-state-flag": "bool", "python-state-pair": "struct<tag:string,n:int32>",
    "python-state-recent": "list<int32>", "python-state-buckets": "map<string,int>",
    "python-state-total": "int", "python-state-seen": "list<string>",
}
PROFILE_STATES = ["_timer_state/processing_user-timers", "_timer_state/event_user-timers", "python-state-count",
                  "python-state-name", "python-state-buckets", "python-state-ratio", "python-state-flag",
                  "python-state-pair", "python-state-recent"]


def rows(path: Path, uid: str, state: str, typed: bool = True) -> list[FlinkKeyedEntry]:
    snapshot = open_flink_snapshot(str(path), uids=UIDS)
    value_type = VALUE_TYPES.get(state) if typed else None
    return list(read_keyed_state(snapshot, uid, state, value_type=value_type))


def by_key(entries: list[FlinkKeyedEntry]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for e in entries:
        key = e.key["f0"]
        if e.user_key is not None:
            out.setdefault(key, {})[e.user_key] = e.value
        else:
            assert key not in out
            out[key] = e.value
    return out


def profile_expected(state: str) -> dict[str, Any]:
    last = {i: i + 2000 for i in range(1000)}
    return {
        "python-state-count": {f"key-{i}": 3 for i in range(1000)},
        "python-state-name": {f"key-{i}": f"user-{i}" for i in range(1000)},
        "python-state-ratio": {f"key-{i}": last[i] / 7.0 for i in range(1000)},
        "python-state-flag": {f"key-{i}": last[i] % 2 == 0 for i in range(1000)},
        "python-state-pair": {f"key-{i}": {"tag": f"t{last[i] % 5}", "n": last[i]} for i in range(1000)},
        "python-state-recent": {f"key-{i}": [i, i + 1000, i + 2000] for i in range(1000)},
        "python-state-buckets": {f"key-{i}": {f"b{n % 3}": n for n in (i, i + 1000, i + 2000)} for i in range(1000)},
        "_timer_state/event_user-timers": {f"key-{i}": FAR_FUTURE + i for i in range(1000)},
        "_timer_state/processing_user-timers": {},
    }[state]


@pytest.mark.parametrize("fixture", ["pyflink-2.3/rocksdb", "pyflink-1.20/rocksdb"])
def test_every_state_of_the_incremental_checkpoint_decodes_to_the_job_values(
        pyflink_jobs: Any, tmp_path: Path, fixture: str) -> None:
    checkpoint = pyflink_jobs[fixture].relocated_checkpoint(tmp_path)
    handle = open_flink_snapshot(str(checkpoint), uids=UIDS).metadata.operator("profile").subtasks[0]
    assert handle.managed_keyed_state is not None and handle.managed_keyed_state.kind is KeyedHandleKind.INCREMENTAL
    for state in PROFILE_STATES:
        entries = rows(checkpoint, "profile", state)
        assert by_key(entries) == profile_expected(state), state
        assert {e.subtask for e in entries} <= {0, 1, 2}
    name = rows(checkpoint, "profile", "python-state-name")
    assert all(e.expiry is not None and e.expiry > 1.7e12 for e in name)  # TTL: last-access timestamp
    assert all(e.expiry is None for e in rows(checkpoint, "profile", "python-state-count"))
    totals = by_key(rows(checkpoint, "sparse", "python-state-total"))
    assert totals == {k: sum(n for n in range(3000) if n % 40 == k) for k in range(40)}
    seen = rows(checkpoint, "sparse", "python-state-seen")
    assert {e.key["f0"]: sorted(e.value) for e in seen} == {
        k: sorted(f"n{n}" for n in range(3000) if n % 40 == k) for k in range(40)}
    assert all(e.expiry is not None for e in seen)
    timers = by_key(rows(checkpoint, "sparse", "_timer_state/processing_user-timers"))
    assert timers == {k: FAR_FUTURE + k for k in range(40)}


@pytest.mark.parametrize("fixture,kinds", [("pyflink-2.3/rocksdb", ("native", "checkpoint")),
                                           ("pyflink-1.20/rocksdb", ("checkpoint",)),
                                           ("pyflink-2.3/hashmap", ("checkpoint",))])
def test_native_snapshots_give_the_rows_of_the_canonical_savepoint(
        pyflink_jobs: Any, tmp_path: Path, fixture: str, kinds: tuple[str, ...]) -> None:
    job = pyflink_jobs[fixture]
    paths = {kind: job.savepoint("native") if kind == "native" else job.relocated_checkpoint(tmp_path)
             for kind in kinds}
    canonical = open_flink_snapshot(str(job.savepoint("canonical")), uids=UIDS)
    for uid in ("profile", "sparse"):
        for support in decodable_states(canonical, uid):
            assert support.decoder is not None, support.reason
            expected = sorted(map(repr, rows(job.savepoint("canonical"), uid, support.name, typed=False)))
            assert expected or "processing" in support.name or "event" in support.name
            for kind in kinds:
                assert sorted(map(repr, rows(paths[kind], uid, support.name, typed=False))) == expected, (kind, uid)


def test_canonical_savepoints_decode_to_the_job_values_too(pyflink_jobs: Any) -> None:
    for fixture in ("pyflink-2.3/hashmap", "pyflink-2.3/rocksdb", "pyflink-1.20/rocksdb"):
        savepoint = pyflink_jobs[fixture].savepoint("canonical")
        for state in ("python-state-pair", "python-state-buckets", "_timer_state/event_user-timers"):
            assert by_key(rows(savepoint, "profile", state)) == profile_expected(state), (fixture, state)


def test_key_groups_restrict_what_rocksdb_reads(pyflink_jobs: Any) -> None:
    native = pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("native")
    snapshot = open_flink_snapshot(str(native), uids=UIDS)
    every = list(read_keyed_state(snapshot, "profile", "python-state-count"))
    wanted = {3, 90, 200, 255}
    some = list(read_keyed_state(snapshot, "profile", "python-state-count", key_groups=wanted))
    assert some == [e for e in every if e.key_group in wanted] and some
    assert [e.key_group for e in every] == sorted(e.key_group for e in every)  # key-group order


def test_value_type_mismatches_are_bad_input_or_named_damage(pyflink_jobs: Any) -> None:
    savepoint = open_flink_snapshot(str(pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("native")), uids=UIDS)
    with pytest.raises(BadInputError, match="map state: declare map<KEY,VALUE>"):
        list(read_keyed_state(savepoint, "profile", "python-state-buckets", value_type="int"))
    with pytest.raises(BadInputError, match="applies to PyFlink state"):
        list(read_keyed_state(savepoint, "profile", "_timer_state/event_user-timers", value_type="int"))
    with pytest.raises(CorruptStateError, match="3 elements where a PyFlink value state holds one"):
        list(read_keyed_state(savepoint, "profile", "python-state-recent", value_type="int32"))
    with pytest.raises(CorruptStateError, match="bytes left after a int32 value"):
        list(read_keyed_state(savepoint, "profile", "python-state-count", value_type="int32"))


def test_temporary_rocksdb_files_are_removed_also_on_failure(
        pyflink_jobs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    checkpoint = pyflink_jobs["pyflink-2.3/rocksdb"].relocated_checkpoint(tmp_path)
    assert len(rows(checkpoint, "profile", "python-state-count")) == 1000
    assert os.listdir(temp) == []
    snapshot = open_flink_snapshot(str(checkpoint), uids=UIDS)
    handles = [s.managed_keyed_state for s in snapshot.metadata.operator("profile").subtasks]
    sst = next(n.handle for h in handles if h for n in h.shared + h.private
               if n.local_path.startswith("OPTIONS") and n.handle and n.handle.kind is StreamHandleKind.FILE)
    assert sst is not None and sst.path is not None
    damaged = Path(sst.path.removeprefix("file:"))
    damaged.write_bytes(b"not an options file".ljust(damaged.stat().st_size, b"#"))
    with pytest.raises(CorruptStateError, match="RocksDB cannot read its OPTIONS file"):
        list(read_keyed_state(snapshot, "profile", "python-state-count"))
    assert os.listdir(temp) == []
    damaged.write_bytes(b"not an options file")
    with pytest.raises(CorruptStateError, match="RocksDB file OPTIONS-.*: 19 bytes, _metadata records"):
        list(read_keyed_state(snapshot, "profile", "python-state-count"))
    assert os.listdir(temp) == []
    stream = iter(read_keyed_state(open_flink_snapshot(str(pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("native")),
                                                       uids=UIDS), "profile", "python-state-count"))
    next(stream)
    assert [p for p in os.listdir(temp) if p.startswith(TEMP_PREFIX)]  # open while reading
    stream.close()  # a consumer that stops early (or is interrupted) closes the generator
    assert os.listdir(temp) == []


def test_a_local_name_that_is_not_a_plain_file_name_is_refused(pyflink_jobs: Any) -> None:
    snapshot = open_flink_snapshot(str(pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("native")))
    inline = StreamHandle(StreamHandleKind.BYTE_STREAM, 1, 0, name="x", data=b"x")
    handle = KeyedStateHandle(KeyedHandleKind.INCREMENTAL, 11, 0, KeyGroupRange(0, 0),
                              shared=(NamedStreamHandle("../escape.sst", inline),))
    with pytest.raises(UnsafePathError, match="not a plain file name"), materialized_rocksdb(snapshot, handle):
        pass


@pytest.mark.s3
def test_native_savepoint_on_s3_decodes_like_the_local_one(
        pyflink_jobs: Any, s3_server: dict[str, Any], s3_bucket: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server["storage_options"])
    source = pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("native")
    target = f"{s3_bucket}/savepoints/{source.name}"
    for file in source.iterdir():
        fs.pipe_file(f"{target}/{file.name}", file.read_bytes())
    remote = open_flink_snapshot(target, storage_options=s3_server["storage_options"], uids=UIDS)
    local = rows(source, "sparse", "python-state-total")
    assert list(read_keyed_state(remote, "sparse", "python-state-total", value_type="int")) == local


def test_a_damaged_heap_checkpoint_is_named_damage(pyflink_jobs: Any, tmp_path: Path) -> None:
    checkpoint = pyflink_jobs["pyflink-2.3/hashmap"].relocated_checkpoint(tmp_path)
    snapshot = open_flink_snapshot(str(checkpoint), uids=UIDS)
    handle = snapshot.metadata.operator("profile").subtasks[2].managed_keyed_state
    assert handle is not None and handle.delegate is not None and handle.delegate.path is not None
    state_file = checkpoint / handle.delegate.path
    data = bytearray(state_file.read_bytes())
    data[handle.key_group_offsets[5]] ^= 0x7F  # the key group's own id
    state_file.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match=f"key group {handle.key_group_range.start + 5}"):
        list(read_keyed_state(snapshot, "profile", "python-state-count"))
