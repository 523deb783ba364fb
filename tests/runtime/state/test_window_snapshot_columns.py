"""Namespaced (window) tables snapshot as columns: the same encoded rows as the row path."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from statekit.runtime.state.backend import rows_of
from statekit.runtime.state.backend_hashmap import namespaced_columns
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.metadata import StateDescriptor, StateKind


def _encoded(kind: StateKind, rows: Any) -> pa.Table:
    descriptor = StateDescriptor(name="s", kind=kind, value_serializer="msgpack",
                                 user_key_serializer="msgpack" if kind is StateKind.MAP else None,
                                 namespace_type="list<int>")
    return StateCodec(descriptor, "msgpack", for_write=True).encode_keyed_rows(rows)


VALUE_TABLES = [
    {},
    {("a", (0, 1000)): 3, ("b", (0, 1000)): 1, ("a", (1000, 2000)): 7},
    {(("k", 1), ()): [1, 2], ("z", (5, 9)): {"x": 1}},
]
MAP_TABLES = [
    {},
    {("a", (0, 1000)): {(0, 999): True}, ("b", (0, 1000)): {(0, 999): True}},  # one timer per pair
    {("a", (0, 1000)): {(0, 999): True, (0, 1999): True}, ("b", (1000, 2000)): {(1, 5): True}},
    {("a", (0, 1000)): {}, ("b", (0, 1000)): {"t": 1}},  # an emptied map has no rows
]


@pytest.mark.parametrize("data", VALUE_TABLES)
def test_value_columns_encode_as_the_rows(data: dict[Any, Any]) -> None:
    columns = namespaced_columns(StateKind.VALUE, data)
    assert columns.keys == [k for k, _ in data] and columns.namespaces == [n for _, n in data]
    assert _encoded(StateKind.VALUE, columns).equals(
        _encoded(StateKind.VALUE, rows_of(StateKind.VALUE, data, namespaced=True)))


@pytest.mark.parametrize("data", MAP_TABLES)
def test_map_columns_encode_as_the_rows(data: dict[Any, Any]) -> None:
    columns = namespaced_columns(StateKind.MAP, data)
    rows = rows_of(StateKind.MAP, data, namespaced=True)
    assert list(zip(columns.keys, columns.namespaces, columns.user_keys or [], columns.values)) == rows
    assert _encoded(StateKind.MAP, columns).equals(_encoded(StateKind.MAP, rows))
