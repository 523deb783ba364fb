"""Writing Flink savepoints: types, headers, layouts, ``bootstrap --format flink`` and spec files.

The byte layouts are checked against real Flink output: headers byte for byte against the
golden PyFlink 2.3 / 1.20 and Flink 2.3 savepoints, and every entry of the golden PyFlink
savepoint's states without a TTL re-encoded from its decoded values gives Flink's bytes.
(The restore in real Flink is tests/flink/test_flink_write_restore.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.cli.main import cli
from statekit.flink.cursor import ByteCursor
from statekit.flink.entries import read_keyed_state
from statekit.flink.key_hash import key_hasher
from statekit.flink.keygroups import flink_murmur_hash, java_string_hash
from statekit.flink.metadata import read_flink_metadata
from statekit.flink.pyflink import parse_pyflink_type
from statekit.flink.savepoint_bootstrap import (
    FlinkBootstrapSpec,
    FlinkOperatorSpec,
    FlinkStateSpec,
    bootstrap_flink_savepoint,
    load_spec_file,
)
from statekit.flink.serializers import flink_serializer
from statekit.flink.sources import key_group_entries, keyed_sources, prefix_bytes
from statekit.flink.state_layout import KeyLayout, StateLayout
from statekit.flink.state_meta_writer import StateMetaSpec, encode_keyed_backend_meta
from statekit.flink.storage import load_snapshot, read_stream_bytes
from statekit.flink.type_info import parse_flink_type
from statekit.statefmt.errors import BadInputError

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SAVEPOINTS = [
    GOLDEN / "pyflink-2.3/hashmap/savepoints/savepoint-48634f-b2be849ccf0d",
    GOLDEN / "pyflink-1.20/rocksdb/savepoints/savepoint-4a37e5-754b98d40435",
    GOLDEN / "flink-2.3/hashmap/savepoints/savepoint-962f67-bfc4c25148ed",
]


# ----------------------------------------------------------------------------- headers


@pytest.mark.parametrize("path", SAVEPOINTS, ids=lambda p: p.parts[-4])
def test_headers_are_flinks_bytes(path: Path) -> None:
    snapshot = load_snapshot(str(path))
    checked = 0
    for op in snapshot.metadata.operators:
        for source in keyed_sources(snapshot, op):
            meta = source.meta
            assert meta.header_size is not None and meta.key_serializer is not None
            states = []
            for state in meta.states:
                trees = {s.key: s.tree for s in state.serializers}
                states.append(StateMetaSpec(state.name, state.kind, trees["VALUE_SERIALIZER"],
                                            trees.get("NAMESPACE_SERIALIZER")))
            header = read_stream_bytes(snapshot, source.delegate, length=meta.header_size)
            assert encode_keyed_backend_meta(meta.key_serializer.tree, states) == header
            checked += 1
    assert checked


# ----------------------------------------------------------------------------- types


def decode_java(text: str, data: bytes) -> Any:
    serializer = flink_serializer(parse_flink_type(text).snapshot)
    assert serializer is not None
    cur = ByteCursor(data, source="test")
    value = serializer.read(cur)
    assert cur.remaining == 0
    return value


@settings(deadline=None)
@given(st.text())
def test_strings_are_written_as_java_writes_them(text: str) -> None:
    t = parse_flink_type("string")
    expected = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "replace")
    assert decode_java("string", t.encode_java(text)) == expected
    hasher = key_hasher(t.snapshot)
    assert hasher is not None
    code = hasher.java_hash(t.encode_java(text), 0, where="test")[0]
    units = text.encode("utf-16-be", "surrogatepass")
    java = 0
    for i in range(0, len(units), 2):
        java = (31 * java + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    assert code == java


@settings(max_examples=50, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 31), (1 << 31) - 1), st.text(max_size=20),
       st.floats(allow_nan=False), st.booleans())
def test_rows_lists_and_maps_round_trip(long: int, integer: int, text: str, number: float, flag: bool) -> None:
    row = "row<a:long,b:int,c:string,d:double,e:boolean>"
    value = {"a": long, "b": integer, "c": text, "d": number, "e": flag}
    decoded = decode_java(row, parse_flink_type(row).encode_java(value))
    clean = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "replace")
    assert decoded == {"f0": long, "f1": integer, "f2": clean, "f3": number, "f4": flag}
    assert decode_java("list<long>", parse_flink_type("list<long>").encode_java([long, 0])) == [long, 0]
    assert decode_java("map<int,string>", parse_flink_type("map<int,string>").encode_java({integer: None})) \
        == {integer: None}


def test_pyflink_coder_bytes_read_back_by_the_pyflink_decoders() -> None:
    cases = [("long", "int", 5), ("int", "int32", -3), ("string", "string", "naïve"), ("double", "float", 0.5),
             ("boolean", "bool", True), ("row<tag:string,n:int>", "struct<tag:string,n:int32>", {"tag": "x", "n": 1}),
             ("list<int>", "list<int32>", [1, None, 3]), ("map<string,long>", "map<string,int>", {"a": 1, "b": None}),
             ("bytes", "bytes", b"\x00\x01"), ("short", "int16", -2), ("byte", "int8", 7), ("float", "float32", 0.25)]
    for flink, declared, value in cases:
        assert parse_pyflink_type(declared).decode(parse_flink_type(flink).encode_python(value), "test") == value


@pytest.mark.parametrize(("text", "value", "message"), [
    ("int", 1 << 31, "out of range for a int"),
    ("long", "7", "is not a long"),
    ("char", "ab", "not one UTF-16 code unit"),
    ("row<a:int,b:int>", {"a": 1}, "does not have the fields a, b"),
    ("list<int>", [1, None], "null elements"),
    ("boolean", 2, "is not a boolean"),
])
def test_values_that_do_not_fit_their_type_are_refused(text: str, value: Any, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        parse_flink_type(text).encode_java(value)


@pytest.mark.parametrize("text", ["integer64", "row<a:int", "map<int>", "list<>", "row<a:int,a:long>"])
def test_unknown_types_are_refused(text: str) -> None:
    with pytest.raises(BadInputError, match="invalid Flink type"):
        parse_flink_type(text)


def test_keys_flink_cannot_hash_are_refused() -> None:
    for text in ("bytes", "list<int>", "row<a:map<string,int>>"):
        with pytest.raises(BadInputError, match="Flink cannot key by it"):
            KeyLayout(parse_flink_type(text), False)


# ----------------------------------------------------------------------------- real Flink entries, re-encoded


def test_the_golden_pyflink_entries_are_written_byte_for_byte() -> None:
    """Every entry of the golden PyFlink savepoint's states without TTL, re-encoded from its values."""
    path = SAVEPOINTS[0]
    snapshot = load_snapshot(str(path))
    op = snapshot.metadata.operator("profile")
    key = KeyLayout(parse_flink_type("string"), True)
    layouts = {
        "python-state-count": (StateLayout("count", "value", key, parse_flink_type("long")), "int"),
        "python-state-ratio": (StateLayout("ratio", "value", key, parse_flink_type("double")), "float"),
        "python-state-flag": (StateLayout("flag", "value", key, parse_flink_type("boolean")), "bool"),
        "python-state-pair": (StateLayout("pair", "value", key, parse_flink_type("row<tag:string,n:int>")),
                              "struct<tag:string,n:int32>"),
        "python-state-recent": (StateLayout("recent", "list", key, parse_flink_type("int")), "list<int32>"),
        "python-state-buckets": (StateLayout("buckets", "map", key, parse_flink_type("long"),
                                             parse_flink_type("string")), "map<string,int>"),
        "_timer_state/event_user-timers": (StateLayout("t", "event-timers", key), None),
    }
    prefix = prefix_bytes(op.max_parallelism)
    written, real = set(), set()
    for name, (layout, declared) in layouts.items():
        assert layout.flink_name == name
        for e in read_keyed_state(snapshot, "profile", name, value_type=declared):
            key_bytes = key.encode(e.key["f0"])
            composite, data = layout.entry(key_bytes, None, e.user_key, e.value)
            code = key_hasher(key.snapshot).java_hash(key_bytes, 0, where="t")[0]  # type: ignore[union-attr]
            assert flink_murmur_hash(code) % op.max_parallelism == e.key_group
            written.add((name, e.key_group.to_bytes(prefix, "big") + composite, data))
    for source in keyed_sources(snapshot, op):
        names = tuple(s.name for s in source.meta.states)
        for kg, offset, data in source.key_groups(snapshot):
            for name, k, v, _ in key_group_entries(data, kg, names, prefix, source.source, offset):
                if name in layouts:
                    real.add((name, bytes([k[0] & 0x7F]) + k[1:], v))
    assert written == real and len(real) > 6000


# ----------------------------------------------------------------------------- bootstrap


def rows(tmp_path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"key": ["a", "b", "a", "c"], "n": [1, 2, 3, 4], "tag": ["x", "y", "x", "z"],
                             "ts": [10, 20, 300, 40],
                             "window": [{"start": 0, "end": 10}, {"start": 0, "end": 10}, {"start": 10, "end": 20},
                                        {"start": 0, "end": 10}]}),
                   tmp_path / "rows.parquet")
    return tmp_path / "rows.parquet"


def read_back(path: Path, uid: str, state: str, value_type: str | None = None) -> dict[Any, Any]:
    snapshot = load_snapshot(str(path))
    out: dict[Any, Any] = {}
    for e in read_keyed_state(snapshot, uid, state, value_type=value_type):
        row = isinstance(e.key, dict)
        key = e.key["f0"] if row else e.key
        code = java_string_hash(key) + (62 if row else 0)  # a PyFlink key: Row(key), 31 * (31 + h) + 31... = 62 + h
        assert flink_murmur_hash(code) % 128 == e.key_group
        slot = key if e.user_key is None and (e.namespace is None or e.namespace == "") else \
            (key, e.user_key if e.user_key is not None else tuple(e.namespace.values()))
        assert slot not in out
        out[slot] = e.value
    return out


@pytest.mark.parametrize("pyflink", [False, True])
def test_bootstrap_writes_every_kind(tmp_path: Path, pyflink: bool) -> None:
    path = rows(tmp_path)
    s = FlinkStateSpec
    states = (s("last", "value", ("n",)), s("all", "list", ("n",)), s("tags", "map", ("n",), user_key_column="tag"),
              s("timers", "event-timers", ("ts",)))
    if not pyflink:
        states += (s("total", "reducing", ("n",)), s("windowed", "value", ("n",), namespace_column="window"))
    op = FlinkOperatorSpec("op", states, key_type="string", pyflink=pyflink, parallelism=2, key_column="key",
                           inputs=(str(path),))
    report = bootstrap_flink_savepoint(FlinkBootstrapSpec((op,), str(tmp_path / "out")))
    assert report.rows_read == 4 * len(states)
    out = tmp_path / "out"
    prefix = "python-state-" if pyflink else ""
    scalar = "int" if pyflink else None
    assert read_back(out, "op", prefix + "last", scalar) == {"a": 3, "b": 2, "c": 4}
    assert read_back(out, "op", prefix + "all", "list<int>" if pyflink else None) == {"a": [1, 3], "b": [2], "c": [4]}
    assert read_back(out, "op", prefix + "tags", "map<string,int>" if pyflink else None) == \
        {("a", "x"): 3, ("b", "y"): 2, ("c", "z"): 4}
    timers = read_keyed_state(load_snapshot(str(out)), "op", "_timer_state/event_user-timers")
    assert sorted((e.key["f0"] if pyflink else e.key, e.value) for e in timers) == \
        [("a", 10), ("a", 300), ("b", 20), ("c", 40)]
    if not pyflink:
        assert read_back(out, "op", "total") == {"a": 3, "b": 2, "c": 4}
        assert read_back(out, "op", "windowed") == {("a", (0, 10)): 1, ("b", (0, 10)): 2, ("a", (10, 20)): 3,
                                                    ("c", (0, 10)): 4}
    result = CliRunner().invoke(cli, ["verify", str(out), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["ok"] is True


@pytest.mark.parametrize("version", [3, 4, 5, 6, 7])
def test_every_metadata_version_parses(tmp_path: Path, version: int) -> None:
    path = rows(tmp_path)
    op = FlinkOperatorSpec("op", (FlinkStateSpec("n", "value", ("n",)),), key_column="key", inputs=(str(path),),
                           max_parallelism=256)
    bootstrap_flink_savepoint(FlinkBootstrapSpec((op,), str(tmp_path / "out"), metadata_version=version,
                                                 checkpoint_id=42))
    metadata = read_flink_metadata((tmp_path / "out" / "_metadata").read_bytes(), source="t")
    assert (metadata.version, metadata.checkpoint_id) == (version, 42)
    (written,) = metadata.operators
    assert (written.max_parallelism, written.uid if version >= 5 else "op") == (256, "op")
    assert (metadata.properties is not None) == (version >= 4)
    snapshot = load_snapshot(str(tmp_path / "out"), uids=["op"])
    assert {e.key: e.value for e in read_keyed_state(snapshot, "op", "n")} == {"a": 3, "b": 2, "c": 4}


def test_bad_input_names_the_state_column_and_row(tmp_path: Path) -> None:
    path = rows(tmp_path)

    def run(*states: FlinkStateSpec, key_type: str = "string") -> None:
        op = FlinkOperatorSpec("op", states, key_type=key_type, key_column="key", inputs=(str(path),))
        bootstrap_flink_savepoint(FlinkBootstrapSpec((op,), str(tmp_path / "out")))

    with pytest.raises(BadInputError, match=r"state 'n': 300 is out of range for a byte \(row 3, key column 'key'\)"):
        run(FlinkStateSpec("n", "value", ("ts",), value_type="byte"))
    with pytest.raises(BadInputError, match="no column 'nope'"):
        run(FlinkStateSpec("n", "value", ("nope",)))
    with pytest.raises(BadInputError, match="is not a long"):
        run(FlinkStateSpec("n", "value", ("n",)), key_type="long")
    assert not (tmp_path / "out").exists()
    with pytest.raises(BadInputError, match="map state needs --user-key-column"):
        FlinkStateSpec("n", "map", ("n",))
    with pytest.raises(BadInputError, match="PyFlink keeps reducing state in Python"):
        op = FlinkOperatorSpec("op", (FlinkStateSpec("n", "reducing", ("n",)),), pyflink=True, key_column="key",
                               inputs=(str(path),))
        bootstrap_flink_savepoint(FlinkBootstrapSpec((op,), str(tmp_path / "out")))


def test_spec_files_json_and_toml(tmp_path: Path) -> None:
    path = rows(tmp_path)
    spec = {"metadata_version": 4, "operators": [{"uid": "op", "key_column": "key", "input": path.name, "parallelism": 2,
                                                  "states": [{"name": "n", "value_column": "n"}]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    loaded = load_spec_file(str(tmp_path / "spec.json"), output=str(tmp_path / "o"))
    assert loaded.metadata_version == 4 and loaded.operators[0].states[0].inputs == (str(path),)
    (tmp_path / "spec.toml").write_text(f'output = "{tmp_path / "o2"}"\n[[operators]]\nuid = "op"\nkey_column = "key"\n'
                                        f'input = "{path.name}"\n[[operators.states]]\nname = "n"\nvalue_column = "n"\n')
    try:
        import tomllib  # noqa: F401
    except ImportError:
        pytest.skip("TOML needs Python 3.11")
    assert load_spec_file(str(tmp_path / "spec.toml")).output == str(tmp_path / "o2")
    (tmp_path / "bad.json").write_text(json.dumps({"operators": [{"uid": "op", "colour": 1, "states": []}]}))
    with pytest.raises(BadInputError, match=r"unknown field\(s\) colour"):
        load_spec_file(str(tmp_path / "bad.json"), output="x")


def test_cli_bootstrap_flink_and_its_refusals(tmp_path: Path) -> None:
    path = rows(tmp_path)
    runner = CliRunner()
    base = ["bootstrap", "--format", "flink", "--input", str(path), "--uid", "op", "--state", "n", "--key-column",
            "key", "--value-column", "n"]
    done = runner.invoke(cli, [*base, "--pyflink", "--value-type", "int", "-o", str(tmp_path / "o"), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["operators"][0]["states"][0]["flink_name"] == "python-state-n"
    assert report["operators"][0]["key_type"] == "row<f0:string>" and report["entries"] == 3
    for extra, message in ((["--ttl-ms", "5"], "records no TTL"), (["--from", "x"], "--from adds to a statekit"),
                           (["--key-serializer", "json"], "name statekit serializers")):
        bad = runner.invoke(cli, [*base, *extra, "-o", str(tmp_path / "bad")])
        assert bad.exit_code == 2 and message in bad.output, bad.output
    bad = runner.invoke(cli, ["bootstrap", "--pyflink", "--input", str(path), "--uid", "u", "--state", "s",
                              "--value-column", "n", "-o", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "are for --format flink" in bad.output


def test_the_entry_sorter_spills_and_splits_with_the_same_result() -> None:
    """1 MiB of budget for 3 MiB of entries: spilled, buckets split; the groups equal an in-memory run."""
    import random

    from statekit.flink.entry_sorter import EntrySorter, entries_table

    rng = random.Random(3)
    rows = [(rng.randrange(128), rng.randrange(3), f"key-{rng.randrange(20000)}".encode(), rng.randbytes(30))
            for _ in range(60000)]
    tables = [entries_table(*map(list, zip(*rows[i:i + 5000]))) for i in range(0, len(rows), 5000)]

    def drained(budget: int) -> tuple[list[tuple[int, int, list[bytes], list[bytes]]], int]:
        with EntrySorter(128, 3, concat_states=frozenset({1}), memory_budget=budget) as sorter:
            for table in tables:
                sorter.add(table)
            groups = [g for i in range(3) for g in sorter.groups(i)]
            return groups, sorter.spilled_bytes

    small, spilled = drained(1 << 20)
    big, none = drained(1 << 30)
    assert spilled > 0 and none == 0 and small == big
    assert [kg for kg, _, _, _ in big] == sorted(kg for kg, _, _, _ in big)
    for _, state, keys, values in big:
        assert keys == sorted(set(keys))  # unique, in byte order
        if state != 1:
            continue
        assert all(len(v) % 31 == 30 for v in values)  # list state: elements joined by ','
