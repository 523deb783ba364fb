"""Golden files of format v2: today's writer produces the committed bytes (uncompressed), and
the reader decodes the committed bytes (uncompressed and zstd) to the expected values."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt import layout
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry
from statekit.statefmt.statefile import StateFileReader

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"


def load_make_golden() -> SimpleNamespace:
    return SimpleNamespace(**runpy.run_path(str(GOLDEN_DIR / "make_golden.py")))


def files_of(root: Path) -> dict[str, bytes]:
    return load_make_golden().files_of(root)  # type: ignore[no-any-return]


V2 = GOLDEN_DIR / "statekit-v2"
PLAIN = V2 / "statekit-0.1-v2-all-types"
ZSTD = V2 / "statekit-0.1-v2-all-types-zstd"
T0 = 1_700_000_000_000


def test_the_writer_produces_the_golden_bytes(tmp_path: Path) -> None:
    load_make_golden().write_all_types(str(tmp_path / "out"))
    produced, golden = files_of(tmp_path / "out"), files_of(PLAIN)
    assert sorted(produced) == sorted(golden)
    for name, data in golden.items():
        assert produced[name] == data, f"{name} differs from the golden bytes: the on-disk format changed"


def test_golden_files_stay_small() -> None:
    assert sum(len(d) for d in files_of(PLAIN).values()) < 32_000
    assert sum(len(d) for d in files_of(ZSTD).values()) < 32_000


@pytest.fixture(scope="module", params=[PLAIN, ZSTD], ids=["plain", "zstd"])
def golden(request: pytest.FixtureRequest) -> Path:
    return Path(request.param)


def header_of(path: Path) -> tuple[int, int]:
    """(format version, compression id) of a state file."""
    _, version, _, compression, _ = layout.STATE_FILE_HEADER.unpack_from(path.read_bytes(), 0)
    return version, compression


def test_every_file_is_version_2_with_its_compression(golden: Path) -> None:
    compression = layout.COMPRESSION_IDS["zstd" if golden == ZSTD else "none"]
    files = sorted(golden.rglob("*.sks"))
    assert len(files) == 23 and {header_of(p) for p in files} == {(2, compression)}


def test_zstd_shrinks_the_compressible_block() -> None:
    plain, zstd = (p / "typed" / "notes" / "00000-of-00001.sks" for p in (PLAIN, ZSTD))
    assert zstd.stat().st_size < plain.stat().st_size // 2


def test_typed_value_columns(golden: Path) -> None:
    reader = SavepointReader.read(str(golden))

    def value_type(uid: str, state: str) -> pa.DataType:
        file = reader.operator(uid).subtasks[0].file_of(state)
        assert file is not None
        with reader.open_file(file) as state_file:
            assert isinstance(state_file, StateFileReader)
            return state_file.codec.schema.field("value").type

    assert value_type("counter", "count") == pa.int64()
    assert value_type("counter", "events") == pa.list_(pa.string())
    assert value_type("counter", "window-sum") == pa.float64()
    assert value_type("counter", "average") == pa.struct([("sum", pa.int64()), ("count", pa.int64())])
    assert value_type("typed", "seen-at") == pa.timestamp("ms", tz="UTC")
    assert value_type("typed", "tags") == pa.map_(pa.string(), pa.int64())
    assert value_type("typed", "blob") == pa.binary()  # a top-level bytes value stays serialized
    assert value_type("typed", "anything") == pa.binary()


def test_golden_keyed_values(golden: Path) -> None:
    reader = SavepointReader.read(str(golden))

    def read(uid: str, state: str) -> list[object]:
        return sorted(reader.read_keyed_state(uid, state), key=repr)

    assert read("counter", "count") == sorted([KeyedStateEntry("alice", None, 3, None), KeyedStateEntry("bob", None, 7, None),
                                               KeyedStateEntry("carol", None, -1, None)], key=repr)
    assert read("counter", "events") == sorted([KeyedStateEntry("alice", None, ["login", "logout"], None),
                                                KeyedStateEntry("bob", None, [], None)], key=repr)
    assert read("counter", "attrs") == sorted([MapStateEntry("alice", "age", 30, None, None),
                                               MapStateEntry("alice", "score", 12, None, None),
                                               MapStateEntry("carol", "age", 41, None, None)], key=repr)
    assert read("counter", "window-sum") == sorted([
        KeyedStateEntry("bob", [0, 1000], 1.25, None), KeyedStateEntry("alice", [0, 1000], 2.5, T0 + 60_000),
        KeyedStateEntry("alice", [1000, 2000], 4.0, T0 + 61_000)], key=repr)
    assert read("counter", "average") == [KeyedStateEntry("bob", None, {"sum": 10, "count": 4}, None)]
    assert read("typed", "seen-at") == sorted([KeyedStateEntry(1, None, T0, None), KeyedStateEntry(2, None, T0 + 1, None),
                                               KeyedStateEntry(3, None, None, None)], key=repr)
    assert read("typed", "active") == sorted([KeyedStateEntry(1, None, True, None), KeyedStateEntry(2, None, False, None)],
                                             key=repr)
    assert read("typed", "tags") == sorted([KeyedStateEntry(1, None, {"a": 1, "b": None}, None),
                                            KeyedStateEntry(2, None, {}, None)], key=repr)
    assert read("typed", "sessions") == [KeyedStateEntry(1, None, [
        {"id": "s1", "pages": [1, 2], "raw": b"\x00\xff"}, {"id": "s2", "pages": [], "raw": None}], None)]
    assert read("typed", "blob") == sorted([KeyedStateEntry(1, None, b"\x01\x02", None),
                                            KeyedStateEntry(2, None, b"", None)], key=repr)
    assert read("typed", "anything") == sorted([KeyedStateEntry(1, None, {"nested": [1, "two", None]}, None),
                                                KeyedStateEntry(2, None, 3.5, None)], key=repr)
    assert read("typed", "notes") == [KeyedStateEntry(1, None, "statekit " * 200, None)]


def test_entries_are_in_key_hash_order(golden: Path) -> None:
    reader = SavepointReader.read(str(golden))
    for _, _, batch in reader.read_keyed_batches("typed", "seen-at"):
        pairs = list(zip(batch.column("key_hash").to_pylist(), batch.column("key").to_pylist()))
        assert pairs == sorted(pairs)


def test_golden_operator_values(golden: Path) -> None:
    reader = SavepointReader.read(str(golden))
    assert reader.read_operator_state_per_subtask("source", "offsets") == [[100, 200], [300]]
    assert reader.read_union_state("source", "watermarks") == [T0 - 5_000]
    assert reader.read_broadcast_state("source", "rules") == {"threshold": 10, "mode": "strict"}


def test_golden_verifies_clean(golden: Path) -> None:
    report = verify_snapshot(str(golden))
    assert report.ok and (report.files, report.blocks) == (23, 20)
