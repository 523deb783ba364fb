"""``statekit convert``: statekit keyed state as a Flink savepoint and back (restore proof:
tests/flink/test_flink_write_restore.py, the word count continued in PyFlink)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink.convert import ConvertSpec, convert_to_flink, convert_to_statekit, declared_type_of_spark
from statekit.flink.entries import read_keyed_state
from statekit.flink.keygroups import flink_murmur_hash, java_string_hash
from statekit.flink.storage import load_snapshot
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pyflink-2.3/hashmap/savepoints/savepoint-48634f-b2be849ccf0d"
KEYS = [f"w{i}" for i in range(60)]


def statekit_savepoint(path: Path) -> Path:
    d = StateDescriptor
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("counter", {
        d("count", StateKind.VALUE, value_type="int"): [(k, i) for i, k in enumerate(KEYS)],
        d("seen", StateKind.LIST, value_type="string"): [(k, [k, k.upper()]) for k in KEYS],
        d("tags", StateKind.MAP, value_type="float", user_key_type="string"): [(k, "a", 0.5) for k in KEYS],
        d("profile", StateKind.VALUE, value_type="struct<name:string,n:int>"):
            [(k, {"name": k, "n": i}) for i, k in enumerate(KEYS)],
        d("_timers", StateKind.MAP, value_type="bool", user_key_type="string"):
            [(k, "e:1000", True) for k in KEYS[:10]] + [(k, "p:2000", True) for k in KEYS[:5]],
    }, parallelism=2)
    writer.with_operator("windows", {
        d("window-contents", StateKind.VALUE, value_type="int", namespace_type="list<int>"):
            [(k, [0, 60_000], i) for i, k in enumerate(KEYS)] + [(k, [60_000, 120_000], 1) for k in KEYS[:3]],
        d("_window_timers", StateKind.MAP, value_type="bool", user_key_type="list<int>", namespace_type="list<int>"):
            [(k, [0, 60_000], [0, 59_999], True) for k in KEYS],
        d("window-trigger", StateKind.MAP, user_key_type="string", namespace_type="list<int>"):
            [(k, [0, 60_000], "count", 1) for k in KEYS],
    }, parallelism=1)
    writer.with_operator("source", {d("offsets", StateKind.UNION, value_type="int"): [1, 2]})
    writer.write(str(path))
    return path


def flink_values(path: Path, uid: str, state: str, value_type: str | None = None) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for e in read_keyed_state(load_snapshot(str(path)), uid, state, value_type=value_type):
        key = e.key["f0"] if isinstance(e.key, dict) else e.key
        code = java_string_hash(key) + (62 if isinstance(e.key, dict) else 0)
        assert flink_murmur_hash(code) % 128 == e.key_group
        ns = tuple(e.namespace.values()) if isinstance(e.namespace, dict) else None
        slot = (key,) + ((e.user_key,) if e.user_key is not None else ()) + ((ns,) if ns else ())
        out.setdefault(slot, []).append(e.value) if state.startswith("_timer") else out.__setitem__(slot, e.value)
    return out


def test_statekit_state_becomes_flink_state(tmp_path: Path) -> None:
    source = statekit_savepoint(tmp_path / "sk")
    report = convert_to_flink(ConvertSpec(str(source), str(tmp_path / "fl"), "flink",
                                          state_kinds={"windows/window-contents": "reducing"}))
    out = tmp_path / "fl"
    assert flink_values(out, "counter", "count") == {(k,): i for i, k in enumerate(KEYS)}
    assert flink_values(out, "counter", "seen") == {(k,): [k, k.upper()] for k in KEYS}
    assert flink_values(out, "counter", "tags") == {(k, "a"): 0.5 for k in KEYS}
    assert flink_values(out, "counter", "profile") == {(k,): {"f0": k, "f1": i} for i, k in enumerate(KEYS)}
    assert flink_values(out, "counter", "_timer_state/event_user-timers") == {(k,): [1000] for k in KEYS[:10]}
    assert flink_values(out, "counter", "_timer_state/processing_user-timers") == {(k,): [2000] for k in KEYS[:5]}
    windows = flink_values(out, "windows", "window-contents")
    assert windows[(KEYS[4], (0, 60_000))] == 4 and windows[(KEYS[1], (60_000, 120_000))] == 1 and len(windows) == 63
    timers = flink_values(out, "windows", "_timer_state/event_window-timers")
    assert timers == {(k, (0, 60_000)): [59_999] for k in KEYS}
    kinds = {(s.uid, s.target): s.kind for s in report.states}
    assert kinds[("windows", "window-contents")] == "reducing" and kinds[("counter", "count")] == "value"
    assert sorted((s.uid, s.state) for s in report.left_out) == [("source", "offsets"), ("windows", "window-trigger")]
    result = CliRunner().invoke(cli, ["verify", str(out), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["ok"] is True


def test_pyflink_layout_and_the_round_trip_back_to_statekit(tmp_path: Path) -> None:
    source = statekit_savepoint(tmp_path / "sk")
    convert_to_flink(ConvertSpec(str(source), str(tmp_path / "py"), "flink", pyflink=True))
    assert flink_values(tmp_path / "py", "counter", "python-state-count", "int") == \
        {(k,): i for i, k in enumerate(KEYS)}
    back = convert_to_statekit(ConvertSpec(str(tmp_path / "py"), str(tmp_path / "back"), "statekit",
                                           value_types={"count": "int", "seen": "list<string>",
                                                        "tags": "map<string,float>",
                                                        "profile": "struct<name:string,n:int>"}))
    assert {s.target for s in back.states} >= {"count", "seen", "tags", "profile", "_timers"}
    reader = SavepointReader.read(str(tmp_path / "back"))
    assert {e.key: e.value for e in reader.read_keyed_state("counter", "count")} == {k: i for i, k in enumerate(KEYS)}
    assert {e.key: e.value for e in reader.read_keyed_state("counter", "seen")} == {k: [k, k.upper()] for k in KEYS}
    assert {(e.key, e.user_key): e.value for e in reader.read_keyed_state("counter", "tags")} == \
        {(k, "a"): 0.5 for k in KEYS}
    timers = sorted((e.key, e.user_key) for e in reader.read_keyed_state("counter", "_timers"))
    assert timers == sorted([(k, "e:1000") for k in KEYS[:10]] + [(k, "p:2000") for k in KEYS[:5]])


def test_a_real_pyflink_savepoint_converts_to_statekit(tmp_path: Path) -> None:
    report = convert_to_statekit(ConvertSpec(str(GOLDEN), str(tmp_path / "sk"), "statekit",
                                             value_types={"count": "int", "pair": "struct<tag:string,n:int32>"}))
    reader = SavepointReader.read(str(tmp_path / "sk"))
    expected = {e.key["f0"]: e.value for e in read_keyed_state(load_snapshot(str(GOLDEN)), "profile",
                                                                "python-state-count", value_type="int")}
    assert {e.key: e.value for e in reader.read_keyed_state("profile", "count")} == expected and len(expected) == 1000
    pair = {e.key: e.value for e in reader.read_keyed_state("profile", "pair")}
    assert pair["key-7"] == {"tag": "t2", "n": 2007}
    assert reader.operator("profile").state("pair").value_type == "struct<tag:string,n:int>"
    assert {s.uid for s in report.left_out} == {"numbers"}  # the source's splits
    timers = list(reader.read_keyed_state("profile", "_timers"))
    assert len(timers) == 1000 and all(e.user_key.startswith("e:") for e in timers)


def test_refusals_name_the_fix(tmp_path: Path) -> None:
    d = StateDescriptor
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("op", {d("untyped", StateKind.VALUE): [("a", 1)]})
    writer.write(str(tmp_path / "sk"))
    with pytest.raises(BadInputError, match=r"declares no value type: give --value-type op/untyped=TYPE"):
        convert_to_flink(ConvertSpec(str(tmp_path / "sk"), str(tmp_path / "o"), "flink"))
    convert_to_flink(ConvertSpec(str(tmp_path / "sk"), str(tmp_path / "o"), "flink",
                                 value_types={"op/untyped": "int"}))
    assert flink_values(tmp_path / "o", "op", "untyped") == {("a",): 1}
    with pytest.raises(BadInputError, match="shape a Flink savepoint"):
        ConvertSpec(str(GOLDEN), "x", "statekit", pyflink=True)
    runner = CliRunner()
    bad = runner.invoke(cli, ["convert", str(tmp_path / "sk"), "--to", "flink", "--key-type", "op=bytes",
                              "--value-type", "op/untyped=int", "-o", str(tmp_path / "o2")])
    assert bad.exit_code == 2 and "Flink cannot key by it" in bad.output
    assert not (tmp_path / "o2").exists()


def test_declared_types_from_spark_types() -> None:
    assert declared_type_of_spark("struct<f0:bigint,names:array<string>,m:map<string,double>>") == \
        "struct<f0:int,names:list<string>,m:map<string,float>>"
