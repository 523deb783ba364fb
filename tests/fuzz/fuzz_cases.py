"""The snapshots and mutations of the fuzz suite.

statekit: a small valid savepoint written with the writer API (:func:`write_base_snapshot`),
whose ``_metadata`` JSON body is mutated (:class:`Mutation`: targeted in :data:`TARGETED`,
seeded random in :func:`random_mutation`) and re-wrapped with a correct CRC-32
(:func:`wrap_body`, after docs/FORMAT.md, written independently of statekit's own writer),
sometimes together with a filesystem trick (symlinks leaving the directory, FIFOs, sparse
files, ``/dev/zero``).

Apache Flink: the real Flink 2.3 snapshots of ``tests/golden/flink-2.3`` with bytes of their
``_metadata`` flipped, overwritten, truncated or inserted (Flink records no checksum).
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz_harness import RunDirs

REPO = Path(__file__).resolve().parents[2]
FLINK_GOLDEN = REPO / "tests" / "golden" / "flink-2.3"

JOB_ID = "ab" * 16
SNAPSHOT_NAME = "savepoint-ababab-000000000001"
CREATED_AT_MS = 1_700_000_000_000
# the counter's subtask 0 file of state "count" (the first file of the first subtask)
STATE_FILE = "counter/count/00000-of-00002.sks"
SPARSE_SIZE = 3 << 30  # larger than the child's whole address space limit

_MAGIC = b"STKMETA\x01"
_HEADER = struct.Struct("<8sIQ")
_TRAILER = struct.Struct("<I")

Json = Any


# ----------------------------------------------------------------------------- the base snapshot


def write_base_snapshot(path: Path) -> None:
    """Two operators, every state kind family: keyed value/map/list (p=2, M=8), operator list/broadcast."""
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    attrs = StateDescriptor("attrs", StateKind.MAP, value_type="int", user_key_serializer="utf8",
                            user_key_type="string")
    events = StateDescriptor("events", StateKind.LIST, value_type="string")
    offsets = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_serializer="int64", value_type="int")
    rules = StateDescriptor("rules", StateKind.BROADCAST, value_type="json", user_key_serializer="utf8")
    keys = [f"user-{i}" for i in range(24)]
    (SavepointWriter.new_savepoint(max_parallelism=8, job_id=JOB_ID, job_name="fuzz")
     .with_operator("counter", {
         count: [(k, i) for i, k in enumerate(keys)],
         attrs: [(k, "age", i) for i, k in enumerate(keys[:12])],
         events: [(k, ["login", "logout"]) for k in keys[::3]],
     }, parallelism=2)
     .with_operator("source", {offsets: [100, 200, 300], rules: {"threshold": 10, "mode": "strict"}}, parallelism=2)
     .write(str(path), created_at_ms=CREATED_AT_MS))


def read_body(snapshot: Path) -> Json:
    """The JSON body of a statekit ``_metadata`` (magic | version | length | body | crc32)."""
    data = (snapshot / "_metadata").read_bytes()
    _, _, length = _HEADER.unpack_from(data)
    return json.loads(data[_HEADER.size:_HEADER.size + length])


def wrap_body(body: bytes) -> bytes:
    """A ``_metadata`` file around ``body`` with a correct header and CRC-32 (docs/FORMAT.md §2)."""
    return _HEADER.pack(_MAGIC, 1, len(body)) + body + _TRAILER.pack(zlib.crc32(body) & 0xFFFFFFFF)


def encode_body(body: Json | bytes) -> bytes:
    if isinstance(body, bytes):
        return body
    return json.dumps(body, separators=(",", ":"), allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


# ----------------------------------------------------------------------------- mutations


@dataclass(frozen=True)
class Mutation:
    """A change of a valid snapshot.

    Attributes:
        name: Test id.
        what: One line for failure messages.
        body: New JSON body (an object, or raw bytes) from a deep copy of the valid one.
        wrap: Changes the whole ``_metadata`` bytes after wrapping (header-level damage).
        fs: Changes the snapshot's files after ``_metadata`` is written.
        ci: The commands it goes through in the CI run (command names): ``None`` one command
            (rotating over the cases), ``()`` none (the exhaustive variant only). The exhaustive
            variant runs every mutation through every command.
    """

    name: str
    what: str
    body: Callable[[Json], Json | bytes] | None = None
    wrap: Callable[[bytes], bytes] | None = None
    fs: Callable[[RunDirs], None] | None = None
    ci: tuple[str, ...] | None = None


def file_entry(body: Json, op: int = 0, subtask: int = 0, index: int = 0) -> Json:
    return body["operators"][op]["subtasks"][subtask]["files"][index]


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Json], Json]:
    """A body change: the node at ``path`` becomes ``value``."""
    def change(body: Json) -> Json:
        node = body
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value
        return body
    return change


def _delete(path: tuple[Any, ...]) -> Callable[[Json], Json]:
    def change(body: Json) -> Json:
        node = body
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]
        return body
    return change


def _text(edit: Callable[[str], str]) -> Callable[[Json], bytes]:
    """A change of the body's JSON text (for what ``json.dumps`` cannot write)."""
    return lambda body: edit(json.dumps(body, separators=(",", ":"))).encode()


def _then(*changes: Callable[[Json], Json]) -> Callable[[Json], Json]:
    def change(body: Json) -> Json:
        for c in changes:
            body = c(body)
        return body
    return change


def _file_field(name: str, value: Any, op: int = 0, subtask: int = 0) -> Callable[[Json], Json]:
    return _set(("operators", op, "subtasks", subtask, "files", 0, name), value)


def _size_plus(delta: int) -> Callable[[Json], Json]:
    def change(body: Json) -> Json:
        file_entry(body)["size"] += delta
        return body
    return change


def _entries_plus(delta: int) -> Callable[[Json], Json]:
    def change(body: Json) -> Json:
        file_entry(body)["entries"] += delta
        return body
    return change


def _nested(depth: int, leaf: str = "0") -> str:
    return "[" * depth + leaf + "]" * depth


def _kg_all(op: int, ranges: list[list[int]]) -> Callable[[Json], Json]:
    def change(body: Json) -> Json:
        for st, kg in zip(body["operators"][op]["subtasks"], ranges):
            st["key_group_range"] = kg
        return body
    return change


def _duplicate_operator(new_uid: str | None) -> Callable[[Json], Json]:
    def change(body: Json) -> Json:
        twin = copy.deepcopy(body["operators"][0])
        if new_uid is not None:
            twin["uid"] = new_uid
        body["operators"].append(twin)
        return body
    return change


def _same_path_two_subtasks(body: Json) -> Json:
    subtasks = body["operators"][0]["subtasks"]
    subtasks[1]["files"][0] = dict(subtasks[0]["files"][0])
    return body


def _same_path_two_operators(body: Json) -> Json:
    source_file = file_entry(body, op=1)
    counter_file = file_entry(body, op=0)
    for key in ("path", "size", "checksum", "entries"):
        source_file[key] = counter_file[key]
    return body


def key_group_range(m: int, p: int, i: int) -> list[int]:
    """Subtask ``i``'s key-group range (docs/FORMAT.md §3, Flink's KeyGroupRangeAssignment)."""
    return [(i * m + p - 1) // p, ((i + 1) * m - 1) // p]


def _wide_operator(body: Json) -> Json:
    """A valid third operator with parallelism = max parallelism = 32768 and no state."""
    m = 32768
    body["operators"].append({
        "uid": "wide", "name": "wide", "parallelism": m, "max_parallelism": m, "key_serializer": None,
        "states": [], "subtasks": [
            {"index": i, "key_group_range": key_group_range(m, m, i), "files": []}
            for i in range(m)
        ],
    })
    return body


def _max_parallelism(m: int) -> Callable[[Json], Json]:
    """Operator counter with max parallelism ``m`` and the matching key-group ranges."""
    def change(body: Json) -> Json:
        op = body["operators"][0]
        op["max_parallelism"] = m
        for st in op["subtasks"]:
            st["key_group_range"] = key_group_range(m, op["parallelism"], st["index"])
        return body
    return change


def _native_shared(path: str) -> Callable[[Json], Json]:
    return _then(_set(("format",), "native"), _file_field("path", path))


def _relink(target: Callable[[RunDirs], str], relative: str = STATE_FILE) -> Callable[[RunDirs], None]:
    """Replace a snapshot entry by a symlink to ``target(dirs)``."""
    def fs(dirs: RunDirs) -> None:
        entry = dirs.snap / relative
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif os.path.lexists(entry):
            entry.unlink()
        os.symlink(target(dirs), entry)
    return fs


def _move_metadata_out_and_link(dirs: RunDirs) -> None:
    shutil.move(dirs.snap / "_metadata", dirs.outside / "_metadata")
    os.symlink(dirs.outside / "_metadata", dirs.snap / "_metadata")


def _fifo(relative: str) -> Callable[[RunDirs], None]:
    def fs(dirs: RunDirs) -> None:
        entry = dirs.snap / relative
        if os.path.lexists(entry):
            entry.unlink()
        os.mkfifo(entry)
    return fs


def _sparse(relative: str, size: int = SPARSE_SIZE) -> Callable[[RunDirs], None]:
    def fs(dirs: RunDirs) -> None:
        entry = dirs.snap / relative
        with open(entry, "r+b") as f:
            f.truncate(size)
    return fs


def _metadata_dir(dirs: RunDirs) -> None:
    (dirs.snap / "_metadata").unlink()
    (dirs.snap / "_metadata").mkdir()


def _foreign_file(dirs: RunDirs) -> None:
    (dirs.snap / "notes.txt").write_text("not state")


def _outside_copy(relative: str = STATE_FILE) -> Callable[[RunDirs], str]:
    return lambda dirs: str(dirs.outside / "copy" / relative)


M = Mutation
READS_STATE = ("verify", "inspect", "rescale-p3")
WRITES = ("rescale-p3", "rescale-maxp16", "modify-remove-op")
TARGETED: tuple[Mutation, ...] = (
    # ---- filesystem tricks (the paths in _metadata stay valid)
    M("symlink-file-absolute", f"{STATE_FILE} is a symlink to a valid copy outside the snapshot (absolute target)",
      fs=_relink(_outside_copy()), ci=("verify", "diff")),
    M("symlink-file-relative", f"{STATE_FILE} is a relative symlink into the canary beside the snapshot",
      fs=_relink(lambda d: "../../../canary/" + STATE_FILE), ci=READS_STATE),
    M("symlink-dir", "the operator directory counter/ is a symlink to a copy outside the snapshot",
      fs=_relink(lambda d: str(d.outside / "copy" / "counter"), "counter"),
      ci=("dispose", "verify")),
    M("symlink-metadata", "_metadata is a symlink to a valid _metadata outside the snapshot",
      fs=_move_metadata_out_and_link, ci=("inspect", "dispose")),
    M("symlink-devzero-file", f"{STATE_FILE} is a symlink to /dev/zero", fs=_relink(lambda d: "/dev/zero"),
      ci=("verify", "inspect")),
    M("symlink-devzero-file-huge-size", f"{STATE_FILE} -> /dev/zero and its recorded size is 2**40",
      body=_file_field("size", 1 << 40), fs=_relink(lambda d: "/dev/zero"), ci=("verify",)),
    M("symlink-devzero-metadata", "_metadata is a symlink to /dev/zero", fs=_relink(lambda d: "/dev/zero", "_metadata"),
      ci=("inspect", "checkpoints-list", "dispose-dry-run")),
    M("symlink-etc-passwd", f"{STATE_FILE} is a symlink to /etc/passwd", fs=_relink(lambda d: "/etc/passwd")),
    M("symlink-loop", f"{STATE_FILE} is a symlink to itself", fs=_relink(lambda d: os.path.basename(STATE_FILE))),
    M("symlink-dangling", f"{STATE_FILE} is a symlink to a missing file outside",
      fs=_relink(lambda d: str(d.outside / "missing.sks"))),
    M("symlink-dir-to-parent", "an extra entry loop -> .. inside the snapshot (a directory cycle)",
      fs=lambda d: os.symlink("..", d.snap / "loop"), ci=("dispose", "dispose-dry-run", "checkpoints-list")),
    M("fifo-file", f"{STATE_FILE} is a FIFO", fs=_fifo(STATE_FILE), ci=("verify", "inspect", "modify-remove-op")),
    M("fifo-metadata", "_metadata is a FIFO", fs=_fifo("_metadata"), ci=("inspect", "dispose")),
    M("fifo-foreign", "an extra FIFO not named by _metadata", fs=lambda d: os.mkfifo(d.snap / "pipe"),
      ci=("dispose", "checkpoints-list")),
    M("sparse-file", f"{STATE_FILE} is a 3 GiB sparse file (recorded size unchanged)", fs=_sparse(STATE_FILE),
      ci=("verify", "modify-remove-op")),
    M("sparse-file-matching-size", f"{STATE_FILE} is a 3 GiB sparse file and _metadata records 3 GiB",
      body=_file_field("size", SPARSE_SIZE), fs=_sparse(STATE_FILE),
      ci=("inspect", "modify-remove-op")),  # verify CRCs all 3 GiB: ~10 s, exhaustive only
    M("sparse-metadata", "_metadata is padded to a 3 GiB sparse file", fs=_sparse("_metadata"),
      ci=("inspect", "dispose-dry-run")),
    M("metadata-is-directory", "_metadata is a directory", fs=_metadata_dir, ci=("inspect", "checkpoints-list")),
    M("foreign-file", "an extra regular file not named by _metadata", fs=_foreign_file, ci=("dispose",)),
    # ---- paths
    M("path-dotdot", "a file path ../../../outside/copy/... (leads to a valid copy)",
      body=_file_field("path", "../../../outside/copy/" + STATE_FILE)),
    M("path-inner-dotdot", "a file path counter/../../canary/... (leads into the canary)",
      body=_file_field("path", "counter/../../canary/" + STATE_FILE)),
    M("path-absolute", "a file path /etc/passwd", body=_file_field("path", "/etc/passwd")),
    M("path-file-url", "a file path file:///etc/passwd", body=_file_field("path", "file:///etc/passwd"), ci=()),
    M("path-s3-url", "a file path s3://bucket/key.sks", body=_file_field("path", "s3://bucket/key.sks")),
    M("path-memory-url", "a file path memory://x.sks", body=_file_field("path", "memory://x.sks"), ci=()),
    M("path-backslash", "a file path with backslashes", body=_file_field("path", "counter\\..\\..\\x.sks")),
    M("path-nul", "a file path with a NUL byte", body=_file_field("path", "counter/count/x\x00.sks")),
    M("path-empty", "an empty file path", body=_file_field("path", ""), ci=()),
    M("path-dot", "a file path ./counter/...", body=_file_field("path", "./" + STATE_FILE), ci=()),
    M("path-double-slash", "a file path counter//count/...", body=_file_field("path", "counter//count/00000-of-00002.sks"),
      ci=()),
    M("path-shared-canonical", "a canonical snapshot naming ../shared/x.sks", body=_file_field("path", "../shared/x.sks")),
    M("path-shared-native", "format native naming ../shared/x.sks (a valid copy in the job's shared/)",
      body=_native_shared("../shared/x.sks"), ci=("dispose", "verify")),
    M("path-shared-native-escape", "format native naming ../shared/../../outside/copy/...",
      body=_native_shared("../shared/../../outside/copy/" + STATE_FILE)),
    M("path-tilde", "a file path ~/x.sks", body=_file_field("path", "~/x.sks"), ci=("verify", "dispose")),
    M("path-percent-dotdot", "a file path %2e%2e/%2e%2e/x.sks", body=_file_field("path", "%2e%2e/%2e%2e/x.sks")),
    M("path-too-long", "a file path of 3000 components", body=_file_field("path", "a/" * 3000 + "x.sks"),
      ci=("verify", "dispose")),
    M("path-component-too-long", "a file name of 300 characters", body=_file_field("path", "x" * 300 + ".sks")),
    M("path-is-directory", "a file path naming a directory (counter/count)", body=_file_field("path", "counter/count"),
      ci=("verify", "rescale-p3", "dispose")),
    M("path-is-metadata", "a file path naming _metadata itself", body=_file_field("path", "_metadata"),
      ci=("verify", "dispose", "modify-remove-op")),
    M("path-newline-unicode", "a file path with a newline, an RTL override and non-ASCII",
      body=_file_field("path", "counter/count/a\nb\u202e\u00fc.sks"), ci=("verify", "inspect")),
    # ---- duplicates and overlaps
    M("dup-json-key", "checkpoint_id twice in the JSON text (last wins)",
      body=_text(lambda t: t.replace('"checkpoint_id":', '"checkpoint_id":"x","checkpoint_id":', 1)), ci=()),
    M("dup-json-key-path", "a file's path twice in the JSON text, the first one ../../escape",
      body=_text(lambda t: t.replace('"path":', '"path":"../../escape","path":', 1))),
    M("dup-uid", "operator counter twice", body=_duplicate_operator(None)),
    M("dup-operator-same-files", "a copy of counter as counter2 naming the same files", body=_duplicate_operator("counter2"),
      ci=("dispose", "rescale-p3")),
    M("dup-state-name", "state count declared twice",
      body=lambda b: (b["operators"][0]["states"].append(dict(b["operators"][0]["states"][0])), b)[1], ci=()),
    M("dup-file-same-state", "two files of state count in one subtask",
      body=lambda b: (b["operators"][0]["subtasks"][0]["files"].append(dict(file_entry(b))), b)[1]),
    M("dup-subtask-index", "subtask 0 twice", body=_set(("operators", 0, "subtasks", 1, "index"), 0), ci=()),
    M("same-path-two-subtasks", "subtask 1's count file names subtask 0's file", body=_same_path_two_subtasks,
      ci=("verify", "rescale-p3", "rescale-maxp16")),
    M("same-path-two-operators", "operator source's first file names counter's count file",
      body=_same_path_two_operators, ci=("verify", "modify-remove-op")),
    M("kg-overlap", "key-group ranges [0, 7] and [4, 7]", body=_kg_all(0, [[0, 7], [4, 7]])),
    M("kg-reversed", "key-group range [3, 0]", body=_kg_all(0, [[3, 0], [4, 7]]), ci=()),
    M("kg-negative", "key-group range [-1, 3]", body=_kg_all(0, [[-1, 3], [4, 7]]), ci=()),
    M("kg-three-items", "key-group range [0, 1, 3]", body=_kg_all(0, [[0, 1, 3], [4, 7]]), ci=()),
    M("kg-huge", "key-group range [4, 2**64]", body=_kg_all(0, [[0, 3], [4, 1 << 64]])),
    # ---- numbers
    M("checkpoint-id-negative", "checkpoint_id -1", body=_set(("checkpoint_id",), -1)),
    M("checkpoint-id-2**64", "checkpoint_id 2**64", body=_set(("checkpoint_id",), 1 << 64),
      ci=("checkpoints-list", "inspect")),
    M("created-at-10**20", "created_at_ms 10**20", body=_set(("created_at_ms",), 10**20),
      ci=("inspect", "checkpoints-list")),
    M("created-at-negative", "created_at_ms -10**18", body=_set(("created_at_ms",), -10**18),
      ci=("inspect-json", "checkpoints-list")),
    M("created-at-2**63", "created_at_ms 2**63", body=_set(("created_at_ms",), 1 << 63), ci=("rescale-p3",)),
    M("size-negative", "a file size -1", body=_file_field("size", -1), ci=()),
    M("size-off-by-one", "a file size one too large", body=_size_plus(1), ci=("verify", "rescale-p3")),
    M("size-2**62", "a file size 2**62", body=_file_field("size", 1 << 62), ci=("verify", "rescale-p3")),
    M("size-beyond-u64", "a file size 2**64 + 5", body=_file_field("size", (1 << 64) + 5),
      ci=("inspect", "rescale-maxp16")),
    M("entries-negative", "a file's entries -1", body=_file_field("entries", -1), ci=()),
    M("entries-off-by-one", "a file's entries one too many", body=_entries_plus(1),
      ci=("verify", "rescale-maxp16")),
    M("entries-zero", "a file's entries 0", body=_file_field("entries", 0), ci=("rescale-maxp16",)),
    M("entries-2**62", "a file's entries 2**62", body=_file_field("entries", 1 << 62),
      ci=("inspect", "rescale-maxp16")),
    M("checksum-wrong", "a file checksum crc32:00000000", body=_file_field("checksum", "crc32:00000000"),
      ci=("verify", "rescale-p3")),
    M("checksum-unknown", "a file checksum sha1:...", body=_file_field("checksum", "sha1:" + "0" * 40), ci=()),
    M("checksum-malformed", "a file checksum crc32:zz", body=_file_field("checksum", "crc32:zz"), ci=()),
    M("parallelism-zero", "parallelism 0", body=_set(("operators", 0, "parallelism"), 0)),
    M("parallelism-above-max", "parallelism 9 > max parallelism 8", body=_set(("operators", 0, "parallelism"), 9), ci=()),
    M("max-parallelism-32769", "max parallelism 32769", body=_max_parallelism(32769), ci=()),
    M("max-parallelism-32768", "max parallelism 32768 (valid, ranges recomputed)", body=_max_parallelism(32768),
      ci=("inspect", "rescale-maxp16")),
    M("max-parallelism-negative", "max parallelism -8", body=_set(("operators", 0, "max_parallelism"), -8), ci=()),
    M("wide-operator-32768", "a third operator with parallelism 32768 (valid, 32768 subtasks)", body=_wide_operator,
      ci=("inspect",)),
    M("ttl-huge", "ttl_ms 2**80", body=_set(("operators", 0, "states", 0, "ttl_ms"), 1 << 80),
      ci=("rescale-maxp16", "diff")),
    M("ttl-zero", "ttl_ms 0", body=_set(("operators", 0, "states", 0, "ttl_ms"), 0), ci=()),
    M("subtask-index-2**64", "subtask index 2**64", body=_set(("operators", 0, "subtasks", 1, "index"), 1 << 64), ci=()),
    M("nan", "checkpoint_id NaN", body=_text(lambda t: t.replace('"checkpoint_id":0', '"checkpoint_id":NaN', 1)), ci=()),
    M("infinity", "created_at_ms Infinity", body=_set(("created_at_ms",), float("inf"))),
    M("float-1e400", "a file size 1e400", body=_text(lambda t: t.replace('"size":', '"size":1e400,"x":', 1))),
    M("int-5000-digits", "checkpoint_id with 5000 digits",
      body=_text(lambda t: t.replace('"checkpoint_id":0', '"checkpoint_id":' + "9" * 5000, 1))),
    # ---- types and structure
    M("type-checkpoint-id-string", "checkpoint_id \"7\"", body=_set(("checkpoint_id",), "7")),
    M("type-checkpoint-id-bool", "checkpoint_id true", body=_set(("checkpoint_id",), True), ci=()),
    M("type-checkpoint-id-float", "checkpoint_id 7.0", body=_set(("checkpoint_id",), 7.0), ci=()),
    M("type-operators-object", "operators {}", body=_set(("operators",), {})),
    M("type-operator-string", "operators[0] \"counter\"", body=_set(("operators", 0), "counter"), ci=()),
    M("type-parallelism-string", "parallelism \"2\"", body=_set(("operators", 0, "parallelism"), "2"), ci=()),
    M("type-max-parallelism-float", "max parallelism 8.5", body=_set(("operators", 0, "max_parallelism"), 8.5), ci=()),
    M("type-kg-range-string", "key_group_range \"0-3\"",
      body=_set(("operators", 0, "subtasks", 0, "key_group_range"), "0-3"), ci=()),
    M("type-kg-range-floats", "key_group_range [0.0, 3.0]",
      body=_set(("operators", 0, "subtasks", 0, "key_group_range"), [0.0, 3.0])),
    M("type-files-object", "files {}", body=_set(("operators", 0, "subtasks", 0, "files"), {}), ci=()),
    M("type-size-string", "a file size \"1234\"", body=_file_field("size", "1234"), ci=()),
    M("type-entries-list", "a file's entries []", body=_file_field("entries", []), ci=()),
    M("type-checksum-int", "a file checksum 123", body=_file_field("checksum", 123), ci=()),
    M("type-path-int", "a file path 7", body=_file_field("path", 7)),
    M("type-path-list", "a file path [\"a\"]", body=_file_field("path", ["a"]), ci=()),
    M("type-properties-list", "properties [\"a\"]", body=_set(("properties",), ["a"])),
    M("type-properties-nested", "properties {\"a\": {\"b\": [1, 2]}}", body=_set(("properties",), {"a": {"b": [1, 2]}}),
      ci=("inspect-json", "rescale-p3")),
    M("type-state-null", "states[0] null", body=_set(("operators", 0, "states", 0), None)),
    M("type-job-id-int", "job_id 5", body=_set(("job_id",), 5), ci=()),
    M("top-level-list", "the body is []", body=lambda b: []),
    M("top-level-string", "the body is \"x\"", body=lambda b: "x", ci=()),
    M("top-level-null", "the body is null", body=lambda b: None, ci=()),
    M("missing-operators", "no operators", body=_delete(("operators",))),
    M("missing-format", "no format", body=_delete(("format",)), ci=()),
    M("missing-subtasks", "operator without subtasks", body=_delete(("operators", 0, "subtasks")), ci=()),
    M("missing-path", "a file without a path", body=_delete(("operators", 0, "subtasks", 0, "files", 0, "path")), ci=()),
    M("empty-operators", "operators []", body=_set(("operators",), []),
      ci=("inspect", "rescale-p3")),
    M("kind-checkpoint-native", "kind checkpoint, format native",
      body=_then(_set(("kind",), "checkpoint"), _set(("format",), "native")), ci=("checkpoints-list", "dispose")),
    M("kind-unknown", "kind \"Savepoint\"", body=_set(("kind",), "Savepoint"), ci=()),
    M("state-kind-unknown", "a state kind \"set\"", body=_set(("operators", 0, "states", 0, "kind"), "set")),
    M("serializer-unknown", "a value serializer \"java\"",
      body=_set(("operators", 0, "states", 0, "value_serializer"), "java"), ci=()),
    M("serializer-pickle", "state count's value serializer is pickle (its bytes are msgpack)",
      body=_set(("operators", 0, "states", 0, "value_serializer"), "pickle"), ci=("diff", "rescale-maxp16", "verify")),
    M("key-serializer-null", "keyed operator without a key serializer",
      body=_set(("operators", 0, "key_serializer"), None), ci=()),
    M("value-type-deep", "value_type list<list<...int...>> nested 3000 deep",
      body=_set(("operators", 0, "states", 0, "value_type"), "list<" * 3000 + "int" + ">" * 3000)),
    M("value-type-wide", "value_type struct<> of 20000 fields",
      body=_set(("operators", 0, "states", 0, "value_type"),
                "struct<" + ",".join(f"f{i}:int" for i in range(20000)) + ">")),
    # ---- names that reach renderers and output paths
    M("uid-markup", "uid \"[/]\" (rich markup)", body=_set(("operators", 0, "uid"), "[/]"),
      ci=("inspect", "rescale-p3", "modify-remove-op", "diff")),
    M("job-name-markup", "job_name \"[bold red]x[/bold blue]\"", body=_set(("job_name",), "[bold red]x[/bold blue]"),
      ci=("inspect", "checkpoints-list")),
    M("job-name-ansi", "job_name with terminal escape sequences", body=_set(("job_name",), "\x1b[2J\x1b]0;x\x07"),
      ci=("inspect",)),
    M("uid-dotdot", "uid \"../../outside\" (output paths are built from uids)",
      body=_set(("operators", 0, "uid"), "../../outside"), ci=WRITES),
    M("uid-empty", "uid \"\"", body=_set(("operators", 0, "uid"), "")),
    M("uid-lone-surrogate", "uid with a lone UTF-16 surrogate (\\ud800, valid JSON, not encodable)",
      body=_text(lambda t: t.replace('"uid":"counter"', '"uid":"counter\\ud800"', 1)),
      ci=("inspect", "rescale-p3", "diff")),
    M("job-name-lone-surrogate", "job_name with a lone UTF-16 surrogate (\\ud800)",
      body=_text(lambda t: t.replace('"job_name":"fuzz"', '"job_name":"fuzz\\ud800"', 1)),
      ci=("inspect", "checkpoints-list")),
    M("path-lone-surrogate", "a file path with a lone UTF-16 surrogate (\\ud800)",
      body=_text(lambda t: t.replace('"path":"', '"path":"\\ud800', 1)), ci=("verify", "inspect")),
    M("uid-nul", "uid with a NUL character", body=_set(("operators", 0, "uid"), "count\x00er"), ci=()),
    M("uid-too-long", "uid of 300 characters (output paths are built from uids)",
      body=_set(("operators", 0, "uid"), "u" * 300), ci=("rescale-p3",)),
    M("state-name-slash", "state name \"a/../../b\" (output paths are built from state names)",
      body=_then(_set(("operators", 0, "states", 0, "name"), "a/../../b"), _file_field("state", "a/../../b"),
                 _set(("operators", 0, "subtasks", 1, "files", 0, "state"), "a/../../b")), ci=()),
    M("state-name-dotdot", "state name \"..\" (output paths are built from state names)",
      body=_then(_set(("operators", 0, "states", 0, "name"), ".."), _file_field("state", ".."),
                 _set(("operators", 0, "subtasks", 1, "files", 0, "state"), "..")), ci=WRITES),
    M("job-id-path", "job_id \"../../x\"", body=_set(("job_id",), "../../x"), ci=("checkpoints-list",)),
    # ---- deep nesting and big bodies
    M("deep-nesting-body", "a body nested 100000 arrays deep",
      body=lambda b: ('{"operators":' + _nested(100_000) + "}").encode(),
      ci=("inspect", "checkpoints-list", "dispose")),
    M("deep-nesting-properties", "a property value nested 100000 deep",
      body=_text(lambda t: t.replace('"properties":{', '"properties":{"deep":' + _nested(100_000) + ",", 1))),
    M("deep-nesting-moderate", "a property value nested 900 deep (parses)",
      body=_text(lambda t: t.replace('"properties":{', '"properties":{"deep":' + _nested(900) + ",", 1)),
      ci=("inspect-json", "rescale-p3")),
    M("big-property", "a 20 MB property string", body=_set(("properties",), {"big": "x" * (20 << 20)}),
      ci=("inspect",)),
    # ---- the bytes around the body
    M("invalid-utf8", "a body that is not UTF-8", body=lambda b: b"\xff\xfe{}"),
    M("bom", "a body starting with a UTF-8 BOM", body=lambda b: b"\xef\xbb\xbf" + json.dumps(b).encode()),
    M("trailing-garbage", "the JSON followed by garbage", body=lambda b: json.dumps(b).encode() + b" }x", ci=()),
    M("empty-body", "an empty body", body=lambda b: b"", ci=()),
    M("header-version-2", "format version 2", wrap=lambda d: d[:8] + struct.pack("<I", 2) + d[12:]),
    M("header-bad-magic", "magic STKMETA\\x02", wrap=lambda d: b"STKMETA\x02" + d[8:], ci=()),
    M("header-length-huge", "body length 2**63", wrap=lambda d: d[:12] + struct.pack("<Q", 1 << 63) + d[20:]),
    M("header-truncated", "the last 3 bytes cut off", wrap=lambda d: d[:-3], ci=()),
    M("header-padded", "a byte appended", wrap=lambda d: d + b"\x00", ci=()),
    M("header-crc-wrong", "a wrong CRC", wrap=lambda d: d[:-4] + bytes(4)),
    M("header-only-magic", "only the magic", wrap=lambda d: d[:8], ci=()),
)


# ----------------------------------------------------------------------------- random mutations

_PALETTE: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2, 7, 8, 9, 127, 128, 32767, 32768, 32769, 2**31, 2**32, 2**53 + 1, 2**63 - 1,
    2**63, 2**64, -(2**63), 10**30, 0.5, -0.0, 1e308, float("nan"), float("inf"), "", "x", "counter", "source",
    "count", "value", "map", "native", "checkpoint", "msgpack", "pickle", "int", "crc32:00000000", "../x",
    "../shared/x.sks", "/etc/passwd", "file:///etc/passwd", "s3://b/k", "a\x00b", "[/]", "\u202e", "..",
    "x" * 5000, [], [0], [0, 7], [7, 0], [0, 2**64], {}, {"a": 1}, [[[[[]]]]],
)


def _nodes(value: Json, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Json]]:
    """Every node of a JSON tree with its path (the root excluded)."""
    found: list[tuple[tuple[Any, ...], Json]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.append((path + (key,), child))
        found.extend(_nodes(child, path + (key,)))
    return found


def _parent(body: Json, path: tuple[Any, ...]) -> Json:
    node = body
    for step in path[:-1]:
        node = node[step]
    return node


def _show(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(root)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _one_random_change(rng: random.Random, body: Json) -> str:
    """One change at a random node; same-key swaps and nudges keep types, so the parser may accept it."""
    nodes = _nodes(body)
    if not nodes:
        return "nothing left to change"
    path, value = rng.choice(nodes)
    parent = _parent(body, path)
    action = rng.choices(["replace", "same-key-swap", "nudge", "delete", "duplicate"], [40, 25, 15, 10, 10])[0]
    if action == "same-key-swap":
        twins = [(p, v) for p, v in nodes if p[-1] == path[-1] and p != path and isinstance(p[-1], str)
                 and not (p[:len(path)] == path or path[:len(p)] == p)]
        if twins:
            other_path, other = rng.choice(twins)
            parent[path[-1]], _parent(body, other_path)[other_path[-1]] = copy.deepcopy(other), copy.deepcopy(value)
            return f"swap {_show(path)} <-> {_show(other_path)}"
    if action == "nudge" and isinstance(value, int) and not isinstance(value, bool):
        delta = rng.choice([-1, 1, 2, -(2**32), 2**32, 2**64])
        parent[path[-1]] = value + delta
        return f"{_show(path)} += {delta}"
    if action == "delete":
        del parent[path[-1]]
        return f"delete {_show(path)}"
    if action == "duplicate" and isinstance(parent, list):
        parent.insert(path[-1], copy.deepcopy(value))
        return f"duplicate {_show(path)}"
    new = copy.deepcopy(rng.choice(_PALETTE))
    parent[path[-1]] = new
    return f"{_show(path)} = {_short(new)}"


_RANDOM_FS: tuple[tuple[str, Callable[[RunDirs], None]], ...] = (
    ("symlink to a copy outside", _relink(_outside_copy())),
    ("symlink to /dev/zero", _relink(lambda d: "/dev/zero")),
    ("FIFO", _fifo(STATE_FILE)),
    ("3 GiB sparse", _sparse(STATE_FILE)),
)


def random_mutation(seed: str, base_body: Json) -> Mutation:
    """One to three random changes of the body, sometimes with a filesystem trick (reproducible by seed)."""
    rng = random.Random(seed)
    steps = rng.choice([1, 1, 2, 3])
    state = rng.getstate()

    def apply(body: Json) -> tuple[Json, list[str]]:
        local = random.Random()
        local.setstate(state)  # the same changes on every copy (runs happen in several threads)
        return body, [_one_random_change(local, body) for _ in range(steps)]

    _, changes = apply(copy.deepcopy(base_body))
    what = f"seed {seed!r}: " + "; ".join(changes)
    fs = None
    if rng.random() < 0.25:
        fs_name, fs = rng.choice(_RANDOM_FS)
        what += f"; {STATE_FILE} replaced by a {fs_name}"
    return Mutation(f"random-{seed}", what, body=lambda b: apply(b)[0], fs=fs)


# ----------------------------------------------------------------------------- preparing runs


def prepare_statekit(base: Path, body: Json, mutation: Mutation) -> Callable[[RunDirs], None]:
    """A function that lays out a fresh run directory with the mutated snapshot."""
    def prepare(dirs: RunDirs) -> None:
        shutil.copytree(base, dirs.snap, symlinks=True)
        shutil.copytree(base, dirs.canary, symlinks=True)
        (dirs.canary / "secret.txt").write_text("canary: nothing may read, change or delete this\n")
        dirs.shared.mkdir()
        shutil.copyfile(base / STATE_FILE, dirs.shared / "x.sks")
        shutil.copytree(base, dirs.other, symlinks=True)
        shutil.copytree(base, dirs.outside / "copy", symlinks=True)
        (dirs.outside / "secret.txt").write_text("outside: nothing may read, change or delete this\n")
        data = wrap_body(encode_body(mutation.body(copy.deepcopy(body)) if mutation.body else body))
        if mutation.wrap:
            data = mutation.wrap(data)
        (dirs.snap / "_metadata").write_bytes(data)
        if mutation.fs:
            mutation.fs(dirs)
    return prepare


# ----------------------------------------------------------------------------- Flink


@dataclass(frozen=True)
class FlinkSnapshot:
    """A Flink golden snapshot: the directory copied as ``parent`` and the snapshot inside it."""

    name: str
    parent: Path  # <backend>/checkpoints/<job-id> or <backend>/savepoints
    snapshot: str  # chk-4 or savepoint-...

    @property
    def metadata(self) -> bytes:
        return (self.parent / self.snapshot / "_metadata").read_bytes()


def flink_snapshots() -> list[FlinkSnapshot]:
    found = []
    for meta in sorted(FLINK_GOLDEN.glob("*/*/*/_metadata")) + sorted(FLINK_GOLDEN.glob("*/*/*/*/_metadata")):
        snap = meta.parent
        backend = snap.relative_to(FLINK_GOLDEN).parts[0]
        kind = "checkpoint" if snap.name.startswith("chk-") else "savepoint"
        found.append(FlinkSnapshot(f"{backend}-{kind}", snap.parent, snap.name))
    return found


@dataclass(frozen=True)
class ByteMutation:
    name: str
    what: str
    apply: Callable[[bytes], bytes]


def _put_i32(offset: int, value: int) -> Callable[[bytes], bytes]:
    return lambda d: d[:offset] + struct.pack(">i", value) + d[offset + 4:]


_UID_FIELD = b"\x00\x0drunning-count"  # Java writeUTF of the keyed operator's uid


def flink_targeted(data: bytes) -> list[ByteMutation]:
    """Structure-aware mutations: version, the keyed operator's (max) parallelism, key-group counts, cuts."""
    found = [
        ByteMutation("truncate-3", "cut inside the magic number", lambda d: d[:3]),
        ByteMutation("truncate-8", "only magic and version", lambda d: d[:8]),
        ByteMutation("truncate-half", "cut in the middle", lambda d: d[:len(d) // 2]),
        ByteMutation("truncate-last", "the last byte cut", lambda d: d[:-1]),
        ByteMutation("version-max", "version 0x7fffffff", _put_i32(4, 0x7FFFFFFF)),
        ByteMutation("appended", "1 MiB of 0xff appended", lambda d: d + b"\xff" * (1 << 20)),
        ByteMutation("operators-count-max", "int32s at bytes 16, 20 (master states, operators) = 0, 0x7fffffff",
                     lambda d: d[:16] + struct.pack(">ii", 0, 0x7FFFFFFF) + d[24:]),
    ]
    uid_at = data.find(_UID_FIELD)
    if uid_at >= 0:
        par_at = uid_at + len(_UID_FIELD) + 16  # after the 16-byte operator id
        if struct.unpack_from(">ii", data, par_at) == (1, 128):
            for value in (0x7FFFFFFF, 0, -1, 32769):
                found.append(ByteMutation(f"max-parallelism-{value}", f"keyed operator max parallelism {value}",
                                          _put_i32(par_at + 4, value)))
            found.append(ByteMutation("parallelism-max", "keyed operator parallelism 0x7fffffff",
                                      _put_i32(par_at, 0x7FFFFFFF)))
    kg_at = data.find(struct.pack(">ii", 0, 128))  # a key-group range: start 0, 128 key groups
    if kg_at >= 0:
        for value in (0x7FFFFFFF, 129, -1):
            found.append(ByteMutation(f"key-groups-{value}", f"number of key groups of the first range {value}",
                                      _put_i32(kg_at + 4, value)))
        found.append(ByteMutation("key-group-start-max", "first key group 0x7ffffff0 (beyond max parallelism)",
                                  _put_i32(kg_at, 0x7FFFFFF0)))
    return found


def flink_random(data: bytes, seed: str) -> ByteMutation:
    """A seeded random change: flip, overwrite a 32-bit int, truncate, insert, delete or duplicate bytes."""
    rng = random.Random(seed)
    at = rng.randrange(8, len(data))  # keep magic and version (their damage is targeted above)
    action = rng.choice(["flip", "int", "int", "truncate", "insert", "delete", "duplicate"])
    if action == "flip":
        mask = 1 << rng.randrange(8)
        return ByteMutation(seed, f"bit {mask:#x} of byte {at} flipped",
                            lambda d: d[:at] + bytes([d[at] ^ mask]) + d[at + 1:])
    if action == "int":
        value = rng.choice([0x7FFFFFFF, -1, -(2**31), 0, 1, 0xFFFF, 0x10000, 32768])
        return ByteMutation(seed, f"int32 at byte {at} = {value}", lambda d: d[:at] + struct.pack(">i", value) + d[at + 4:])
    if action == "truncate":
        return ByteMutation(seed, f"cut at byte {at}", lambda d: d[:at])
    n = rng.choice([1, 2, 4, 8, 64])
    if action == "insert":
        extra = bytes(rng.randrange(256) for _ in range(n))
        return ByteMutation(seed, f"{n} random bytes inserted at {at}", lambda d: d[:at] + extra + d[at:])
    if action == "delete":
        return ByteMutation(seed, f"{n} bytes deleted at {at}", lambda d: d[:at] + d[at + n:])
    return ByteMutation(seed, f"{n} bytes at {at} duplicated", lambda d: d[:at + n] + d[at:at + n] + d[at + n:])


def prepare_flink(snapshot: FlinkSnapshot, mutation: ByteMutation | None) -> Callable[[RunDirs], None]:
    def prepare(dirs: RunDirs) -> None:
        shutil.copytree(snapshot.parent, dirs.parent, symlinks=True)
        (dirs.canary).mkdir()
        (dirs.canary / "secret.txt").write_text("canary: nothing may read, change or delete this\n")
        dirs.outside.mkdir()
        (dirs.outside / "secret.txt").write_text("outside: nothing may read, change or delete this\n")
        if mutation is not None:
            meta = dirs.snap / "_metadata"
            meta.write_bytes(mutation.apply(meta.read_bytes()))
    return prepare
