"""``bootstrap_savepoint`` (the local engine): Parquet, CSV and JSON lines in; every state kind out; streaming."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.errors import BadInputError, PathNotFoundError, SerializationError
from statekit.statefmt.keygroups import assign_to_key_group, compute_operator_index_for_key_group
from statekit.writers.bootstrap import BootstrapReport, bootstrap_savepoint
from statekit.writers.bootstrap_spec import BootstrapSpec

ROWS = [
    {"user": f"u{i % 40}", "n": i, "score": i / 4, "tag": f"t{i % 3}", "day": i % 5}
    for i in range(200)
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("inputs")
    table = pa.Table.from_pylist(ROWS)
    (root / "parquet").mkdir()
    pq.write_table(table.slice(0, 120), root / "parquet" / "part-0.parquet", row_group_size=50)
    pq.write_table(table.slice(120), root / "parquet" / "part-1.parquet")
    (root / "parquet" / "_SUCCESS").write_text("")
    pacsv.write_csv(table, root / "rows.csv")
    with open(root / "rows.jsonl", "w", encoding="utf-8") as f:
        for row in ROWS:
            f.write(json.dumps(row) + "\n")
    return {"parquet": str(root / "parquet"), "csv": str(root / "rows.csv"), "json": str(root / "rows.jsonl")}


def last_by(key: str, value: str) -> dict[Any, Any]:
    return {row[key]: row[value] for row in ROWS}


def boot(**spec: Any) -> BootstrapReport:
    """The local engine with its default knobs on ``BootstrapSpec(**spec)``."""
    return bootstrap_savepoint(BootstrapSpec(**spec))


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_value_state_round_trip_from_each_format(inputs: dict[str, str], tmp_path: Path, fmt: str) -> None:
    out = str(tmp_path / "sp")
    spec = BootstrapSpec(inputs=[inputs[fmt]], output=out, uid="counter", state="count", key_column="user",
                         value_columns=["n"], parallelism=3)
    report = bootstrap_savepoint(spec, batch_size=16)
    reader = SavepointReader.read(out)
    assert {e.key: e.value for e in reader.read_keyed_state("counter", "count")} == last_by("user", "n")
    assert report.rows_read == 200 and report.entries == 40 and report.input_format == fmt
    assert reader.descriptor("counter", "count").value_type == "int"
    assert verify_snapshot(out).ok
    op = reader.operator("counter")
    assert (op.parallelism, op.max_parallelism) == (3, 128)
    for subtask, key_group, batch in reader.read_keyed_batches("counter", "count"):
        for key in batch.column("key").to_pylist():
            assert assign_to_key_group(key, 128) == key_group
            assert compute_operator_index_for_key_group(128, 3, key_group) == subtask
    assert [s.entries for s in report.subtasks] == [f.entries for s in op.subtasks for f in s.files]


def test_every_keyed_kind(inputs: dict[str, str], tmp_path: Path) -> None:
    common: dict[str, Any] = dict(inputs=[inputs["parquet"]], uid="op", key_column="user", max_parallelism=64,
                                  parallelism=2)
    boot(output=str(tmp_path / "list"), state="s", kind="list", value_columns=["n"], **common)
    got = {e.key: e.value for e in SavepointReader.read(str(tmp_path / "list")).read_keyed_state("op", "s")}
    assert got == {u: [r["n"] for r in ROWS if r["user"] == u] for u in last_by("user", "n")}
    boot(output=str(tmp_path / "map"), state="s", kind="map", user_key_column="tag",
         value_columns=["score"], **common)
    got_map = {(e.key, e.user_key): e.value
               for e in SavepointReader.read(str(tmp_path / "map")).read_keyed_state("op", "s")}
    assert got_map == {(r["user"], r["tag"]): r["score"] for r in ROWS}
    for kind in ("reducing", "aggregating"):
        boot(output=str(tmp_path / kind), state="s", kind=kind, value_columns=["n", "score"], **common)
        reader = SavepointReader.read(str(tmp_path / kind))
        assert reader.descriptor("op", "s").value_type == "struct<n:int,score:float>"
        got_struct = {e.key: e.value for e in reader.read_keyed_state("op", "s")}
        assert got_struct == {r["user"]: {"n": r["n"], "score": r["score"]} for r in ROWS}
    boot(output=str(tmp_path / "ns"), state="s", value_columns=["n"], namespace_column="day", **common)
    namespaced = SavepointReader.read(str(tmp_path / "ns"))
    got_ns = {(e.key, e.namespace): e.value for e in namespaced.read_keyed_state("op", "s")}
    assert got_ns == {(r["user"], r["day"]): r["n"] for r in ROWS}
    assert namespaced.descriptor("op", "s").namespace_type == "int"  # from the namespace column


def test_list_column_gives_the_whole_list(tmp_path: Path) -> None:
    path = tmp_path / "lists.parquet"
    pq.write_table(pa.table({"k": ["a", "b", "a"], "xs": [[1, 2], [3], [4]]}), path)
    boot(inputs=[str(path)], output=str(tmp_path / "sp"), uid="op", state="s", kind="list",
         key_column="k", value_columns=["xs"])
    reader = SavepointReader.read(str(tmp_path / "sp"))
    assert {e.key: e.value for e in reader.read_keyed_state("op", "s")} == {"a": [4], "b": [3]}
    assert reader.descriptor("op", "s").value_type == "int"


def test_operator_state_kinds(inputs: dict[str, str], tmp_path: Path) -> None:
    boot(inputs=[inputs["json"]], output=str(tmp_path / "l"), uid="src", state="s",
         kind="operator-list", value_columns=["n"], parallelism=3)
    reader = SavepointReader.read(str(tmp_path / "l"))
    assert reader.read_list_state("src", "s") == [r["n"] for r in ROWS]
    assert [len(p) for p in reader.read_operator_state_per_subtask("src", "s")] == [67, 67, 66]
    boot(inputs=[inputs["json"]], output=str(tmp_path / "u"), uid="src", state="s",
         kind="union", value_columns=["tag"], parallelism=2)
    assert SavepointReader.read(str(tmp_path / "u")).read_union_state("src", "s") == [r["tag"] for r in ROWS]
    boot(inputs=[inputs["json"]], output=str(tmp_path / "b"), uid="src", state="s",
         kind="broadcast", user_key_column="user", value_columns=["n"], parallelism=2)
    assert SavepointReader.read(str(tmp_path / "b")).read_broadcast_state("src", "s") == last_by("user", "n")


def test_declared_types_and_serializers(inputs: dict[str, str], tmp_path: Path) -> None:
    out = str(tmp_path / "sp")
    boot(inputs=[inputs["csv"]], output=out, uid="op", state="s", key_column="n",
         value_columns=["n"], value_type="string", key_serializer="int64", value_serializer="json")
    reader = SavepointReader.read(out)
    assert {e.key: e.value for e in reader.read_keyed_state("op", "s")} == {r["n"]: str(r["n"]) for r in ROWS}
    assert reader.operator("op").key_serializer == "int64"
    assert reader.descriptor("op", "s").value_serializer == "json"
    with pytest.raises(BadInputError, match="column 'tag' .* cannot be cast to the declared type int"):
        boot(inputs=[inputs["csv"]], output=str(tmp_path / "bad"), uid="op", state="s",
             key_column="n", value_columns=["tag"], value_type="int")
    with pytest.raises(BadInputError, match="column 'tag' .* cannot be cast to the declared type int"):
        boot(inputs=[inputs["csv"]], output=str(tmp_path / "bad"), uid="op", state="s",
             key_column="n", value_columns=["n", "tag"], value_type="struct<n:int,tag:int>")
    with pytest.raises(SerializationError, match="does not match the declared type: expected list, got int"):
        boot(inputs=[inputs["csv"]], output=str(tmp_path / "bad"), uid="op", state="s",
             key_column="n", value_columns=["n"], value_type="list<int>")
    assert not (tmp_path / "bad").exists()


def test_add_an_operator_to_an_existing_savepoint(inputs: dict[str, str], tmp_path: Path) -> None:
    first = str(tmp_path / "first")
    boot(inputs=[inputs["parquet"]], output=first, uid="counter", state="count",
         key_column="user", value_columns=["n"], parallelism=2, max_parallelism=256)
    second = str(tmp_path / "second")
    report = boot(inputs=[inputs["csv"]], output=second, uid="scores", state="best",
                  key_column="user", value_columns=["score"], from_savepoint=first)
    reader = SavepointReader.read(second)
    assert [op.uid for op in reader.operators] == ["counter", "scores"]
    assert reader.operator("scores").max_parallelism == 256, "defaults to the existing operators'"
    assert reader.metadata.job_id == SavepointReader.read(first).metadata.job_id
    assert report.copied_operators == ["counter"]
    assert {e.key: e.value for e in reader.read_keyed_state("counter", "count")} == last_by("user", "n")
    with pytest.raises(BadInputError, match="operator .counter. exists already .* `statekit modify --remove-operator counter`"):
        boot(inputs=[inputs["csv"]], output=str(tmp_path / "third"), uid="counter", state="x",
             key_column="user", value_columns=["n"], from_savepoint=first)


def test_streaming_with_a_tiny_budget_gives_the_same_savepoint(tmp_path: Path) -> None:
    rows = pa.table({"k": [f"key-{i % 30000}" for i in range(60000)], "v": list(range(60000))})
    pq.write_table(rows, tmp_path / "big.parquet", row_group_size=7000)
    outs = []
    for name, budget, batch in (("small", 1 << 20, 1000), ("large", 256 << 20, 100_000)):
        out = str(tmp_path / name)
        spec = BootstrapSpec(inputs=[str(tmp_path / "big.parquet")], output=out, uid="op", state="s",
                             key_column="k", value_columns=["v"], parallelism=2)
        bootstrap_savepoint(spec, memory_budget=budget, batch_size=batch)
        outs.append(SavepointReader.read(out))
    checksums = [[f.checksum for s in r.operator("op").subtasks for f in s.files] for r in outs]
    assert checksums[0] == checksums[1], "identical bytes whatever the memory budget"
    assert {e.key: e.value for e in outs[0].read_keyed_state("op", "s")} == {f"key-{i}": 30000 + i for i in range(30000)}


@pytest.mark.parametrize("options, error, message", [
    ({"key_column": None}, BadInputError, "value state is keyed: give --key-column"),
    ({"key_column": "nope"}, BadInputError, "no column 'nope' in the input (columns: user, n, score, tag, day)"),
    ({"value_columns": []}, BadInputError, "give at least one --value-column"),
    ({"kind": "map"}, BadInputError, "map state needs --user-key-column"),
    ({"kind": "operator-list"}, BadInputError, "operator state (not keyed): drop --key-column"),
    ({"kind": "bogus"}, BadInputError, "unknown state kind"),
    ({"parallelism": 200, "max_parallelism": 128}, BadInputError, "parallelism 200 is larger than max parallelism 128"),
    ({"inputs": ["/no/such/file.csv"]}, PathNotFoundError, "no such file or directory"),
    ({"input_format": "avro"}, BadInputError, "--input-format 'avro'"),
])
def test_bad_options(inputs: dict[str, str], tmp_path: Path, options: dict[str, Any], error: type[Exception],
                     message: str) -> None:
    arguments: dict[str, Any] = dict(inputs=[inputs["csv"]], output=str(tmp_path / "out"), uid="op", state="s",
                                     key_column="user", value_columns=["n"]) | options
    with pytest.raises(error) as failure:
        boot(**arguments)
    assert message in str(failure.value)
    assert not (tmp_path / "out").exists()


def test_null_keys_and_unreadable_input_are_named(tmp_path: Path) -> None:
    path = tmp_path / "nulls.jsonl"
    path.write_text('{"k": "a", "v": 1}\n{"k": null, "v": 2}\n')
    with pytest.raises(BadInputError, match=r"row 1: column 'k' \(the key\) is null"):
        boot(inputs=[str(path)], output=str(tmp_path / "out"), uid="op", state="s",
             key_column="k", value_columns=["v"])
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(BadInputError, match="broken.parquet: cannot read as parquet"):
        boot(inputs=[str(broken)], output=str(tmp_path / "out"), uid="op", state="s",
             key_column="k", value_columns=["v"])
    assert sorted(os.listdir(tmp_path)) == ["broken.parquet", "nulls.jsonl"]


def test_progress_covers_the_work(inputs: dict[str, str], tmp_path: Path) -> None:
    import contextlib

    bars: list[dict[str, Any]] = []

    def progress(description: str, total: int | None = None, unit: str = "bytes") -> Any:
        bar: dict[str, Any] = {"description": description, "total": total, "done": 0}
        bars.append(bar)

        @contextlib.contextmanager
        def open_bar() -> Any:
            yield lambda _name, amount: bar.__setitem__("done", bar["done"] + amount)

        return open_bar()

    spec = BootstrapSpec(inputs=[inputs["parquet"]], output=str(tmp_path / "sp"), uid="op", state="s",
                         key_column="user", value_columns=["n"], parallelism=2)
    bootstrap_savepoint(spec, progress=progress)
    (bar,) = bars
    assert bar["description"] == "bootstrapping" and bar["total"] > 0
    assert abs(bar["done"] - bar["total"]) <= 0.02 * bar["total"]


def test_a_csv_integer_beyond_64_bits_is_refused_naming_file_column_and_row(tmp_path: Path) -> None:
    """pyarrow reads such a column as floats: 2**70 would be stored as 1.18e21 (float), unseen."""
    path = tmp_path / "big.csv"
    path.write_text(f"k,v\na,1\nb,2.5\nc,{2 ** 70}\n")
    with pytest.raises(BadInputError) as failure:
        boot(inputs=[str(path)], output=str(tmp_path / "out"), uid="op", state="s", key_column="k",
             value_columns=["v"])
    message = str(failure.value)
    assert message.startswith(str(path)) and f"row 2: column 'v' holds the integer {2 ** 70}" in message
    assert "\n" not in message and not (tmp_path / "out").exists()


def test_csv_nan_and_null_spellings_stay_values(tmp_path: Path) -> None:
    """Only an empty field is null: "NaN" is a float NaN, "NA" and "null" are text — none of them
    becomes a null behind the user's back (pyarrow's default null spellings would)."""
    import math

    path = tmp_path / "values.csv"
    path.write_text("k,v,w\na,1.5,NA\nb,NaN,null\nc,,x\n")
    out = str(tmp_path / "out")
    boot(inputs=[str(path)], output=out, uid="op", state="s", key_column="k", value_columns=["v", "w"])
    values = {e.key: e.value for e in SavepointReader.read(out).read_keyed_state("op", "s")}
    assert values["a"] == {"v": 1.5, "w": "NA"} and values["c"] == {"v": None, "w": "x"}
    assert math.isnan(values["b"]["v"]) and values["b"]["w"] == "null"


def test_values_nested_deeper_than_a_type_can_be_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"k": "a", "v": ' + "[" * 5000 + "]" * 5000 + "}\n")
    for declared in (None, "json"):
        with pytest.raises(BadInputError, match="column 'v' nests lists or structs more than 32 levels deep"):
            boot(inputs=[str(path)], output=str(tmp_path / "out"), uid="op", state="s", key_column="k",
                 value_columns=["v"], value_type=declared)
    assert not (tmp_path / "out").exists()


def test_add_an_operator_to_a_native_checkpoint(native_snapshots: Any, inputs: dict[str, str],
                                                tmp_path: Path) -> None:
    from statekit.statefmt.metadata import SnapshotFormat

    out = str(tmp_path / "out")
    boot(inputs=[inputs["parquet"]], output=out, uid="users", state="n", key_column="user", value_columns=["n"],
         from_savepoint=str(native_snapshots.checkpoint))
    assert verify_snapshot(out).ok
    reader = SavepointReader.read(out)
    assert reader.metadata.format is SnapshotFormat.CANONICAL
    truth = SavepointReader.read(str(native_snapshots.canonical))
    assert ({e.key: e.value for e in reader.read_keyed_state("counter", "count")}
            == {e.key: e.value for e in truth.read_keyed_state("counter", "count")})
