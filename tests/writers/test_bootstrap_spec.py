"""``BootstrapSpec``: validated once, when it is made, without touching a file."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.metadata import StateKind
from statekit.writers.bootstrap import bootstrap_savepoint
from statekit.writers.bootstrap_spec import BootstrapSpec, format_from_name
from statekit.writers.key_group_sorter import DuplicateMode
from statekit.writers.row_encoding import plan_bootstrap

# inputs that do not exist: a spec is checked without reading anything
VALID: dict[str, Any] = dict(inputs=["/no/such/rows.csv"], output="/no/such/out", uid="op", state="s",
                             key_column="k", value_columns=["v"])


@pytest.mark.parametrize("fields, message", [
    ({"inputs": []}, "give --input (a file or a directory of Parquet, CSV or JSON-lines files)"),
    ({"input_format": "avro"}, "--input-format 'avro': expected one of parquet, csv, json"),
    ({"uid": ""}, "--uid and --state must not be empty"),
    ({"state": ""}, "--uid and --state must not be empty"),
    ({"output": ""}, "give the output directory (-o OUT)"),
    ({"kind": "bogus"}, "--kind 'bogus': unknown state kind (kinds: value, list, map, reducing, aggregating, "
                        "operator-list, union, broadcast)"),
    ({"value_columns": []}, "give at least one --value-column"),
    ({"key_column": None}, "value state is keyed: give --key-column"),
    ({"kind": "union"}, "union state is operator state (not keyed): drop --key-column/--namespace-column"),
    ({"kind": "map"}, "map state needs --user-key-column (the map key)"),
    ({"user_key_column": "u"}, "--user-key-column is only for map and broadcast state, not value"),
    ({"value_serializer": "yaml"}, "unknown serializer 'yaml' (known: "),
    ({"value_type": "struct<a:int"}, "invalid value type 'struct<a:int'"),
    ({"user_key_type": "wat"}, "invalid value type 'wat'"),
    ({"ttl_ms": 0}, "--ttl-ms 0: a TTL must be positive (milliseconds)"),
    ({"ttl_ms": 5, "namespace_column": "w"}, "namespaced state (--namespace-column) cannot have a TTL: drop --ttl-ms"),
    ({"parallelism": 0}, "operator 'op': parallelism must be at least 1, got 0"),
    ({"max_parallelism": 0}, "operator 'op': max parallelism must be in [1, 32768], got 0"),
    ({"parallelism": 200, "max_parallelism": 128}, "operator 'op': parallelism 200 is larger than max parallelism 128"),
    ({"max_parallelism": 40000}, "operator 'op': max parallelism must be in [1, 32768], got 40000"),
])
def test_a_bad_spec_is_refused_when_made(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInputError) as failure:
        BootstrapSpec(**(VALID | fields))
    assert str(failure.value).startswith(message)
    assert "\n" not in str(failure.value)


def test_a_spec_is_frozen_and_normalized() -> None:
    spec = BootstrapSpec(**(VALID | {"kind": "list", "value_columns": ["v", "w"], "namespace_column": "k"}))
    assert spec.kind is StateKind.LIST and spec.inputs == ("/no/such/rows.csv",) and spec.value_columns == ("v", "w")
    assert spec.columns == ["k", "v", "w"] and spec.operator_name == "op"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.uid = "other"  # type: ignore[misc]
    assert hash(spec) == hash(BootstrapSpec(**(VALID | {"kind": StateKind.LIST, "value_columns": ("v", "w"),
                                                        "namespace_column": "k"})))


def test_the_input_format_comes_from_the_name_unless_given() -> None:
    assert [format_from_name(p) for p in ("a.PARQUET", "a.pq", "b.csv", "c.jsonl", "d.ndjson", "e.txt")] == \
        ["parquet", "parquet", "csv", "json", "json", None]
    assert BootstrapSpec(**VALID).format_of("s3://bucket/x.json") == "json"
    assert BootstrapSpec(**(VALID | {"input_format": "csv"})).format_of("rows.txt") == "csv"
    with pytest.raises(BadInputError, match=r"^cannot tell the format of rows.txt from its name; pass --input-format"):
        BootstrapSpec(**VALID).format_of("rows.txt")


def test_the_plan_resolves_types_and_duplicates_from_the_schema() -> None:
    schema = pa.schema([("k", pa.string()), ("v", pa.list_(pa.int64())), ("w", pa.float64())])
    whole = plan_bootstrap(BootstrapSpec(**(VALID | {"kind": "list"})), schema, 64)
    assert (whole.list_per_row, whole.duplicates, whole.descriptor.value_type) == (True, DuplicateMode.LAST, "int")
    rows = plan_bootstrap(BootstrapSpec(**(VALID | {"kind": "list", "value_columns": ["w"]})), schema, 64)
    assert (rows.list_per_row, rows.duplicates, rows.descriptor.value_type) == (False, DuplicateMode.CONCAT_LISTS, "float")
    struct = plan_bootstrap(BootstrapSpec(**(VALID | {"value_columns": ["w", "k"], "ttl_ms": 5})), schema, 64)
    assert struct.descriptor.value_type == "struct<w:float,k:string>" and struct.descriptor.ttl_ms == 5
    assert struct.key_serializer == "msgpack" and struct.file_path(1) == "op/s/00001-of-00001.sks"
    with pytest.raises(BadInputError, match=r"^in.csv: no column 'x' in the input \(columns: k, v, w\)$"):
        plan_bootstrap(BootstrapSpec(**(VALID | {"value_columns": ["x"]})), schema, 64, where="in.csv")


def test_the_ttl_reaches_a_readable_savepoint(tmp_path: Path) -> None:
    pq.write_table(pa.table({"k": ["a", "b"], "v": [1, 2]}), tmp_path / "in.parquet")
    spec = BootstrapSpec(**(VALID | {"inputs": [str(tmp_path / "in.parquet")], "output": str(tmp_path / "sp"),
                                     "ttl_ms": 60_000}))
    bootstrap_savepoint(spec)
    assert SavepointReader.read(spec.output).descriptor("op", "s").ttl_ms == 60_000
