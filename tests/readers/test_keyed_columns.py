"""``SavepointReader.read_keyed_columns``: the entries of ``read_keyed_state``, as columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

VALUE = StateDescriptor("v", StateKind.VALUE, value_type="int")
MAP = StateDescriptor("m", StateKind.MAP, value_type="string")


def rows_of(columns: dict[str, list[Any]], names: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return list(zip(*(columns[n] for n in names)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(max_size=8), st.integers(-(2**63), 2**63 - 1), max_size=80),
       st.one_of(st.none(), st.sets(st.integers(0, 15), max_size=5)))
def test_columns_are_the_entries(tmp_path: Path, values: dict[str, int], key_groups: set[int] | None) -> None:
    path = tmp_path / f"sp-{len(list(tmp_path.iterdir()))}"
    map_rows = [(k, "u", str(v)) for k, v in values.items()]
    SavepointWriter.new_savepoint(16).with_operator(
        "op", {VALUE: list(values.items()), MAP: map_rows}, parallelism=2).write(str(path))
    reader = SavepointReader.read(str(path))
    columns = list(reader.read_keyed_columns("op", "v", key_groups))
    entries = list(reader.read_keyed_state("op", "v", key_groups))
    assert [r for c in columns for r in rows_of(c, ("key", "namespace", "value", "expiry"))] == [tuple(e) for e in entries]
    if key_groups is None:
        assert {e.key: e.value for e in entries} == values
    map_columns = list(reader.read_keyed_columns("op", "m", key_groups))
    map_entries = list(reader.read_keyed_state("op", "m", key_groups))
    names = ("key", "user_key", "value", "namespace", "expiry")
    assert [r for c in map_columns for r in rows_of(c, names)] == [tuple(e) for e in map_entries]


def test_read_keyed_state_reads_lazily_and_yields_entry_objects(tmp_path: Path) -> None:
    """Like a generator: nothing is looked up before the first entry is asked for (a bad uid
    fails then, not at the call); entries are the named tuples, field by field."""
    import pytest

    from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry
    from statekit.statefmt.errors import StateNotFoundError

    path = str(tmp_path / "sp")
    SavepointWriter.new_savepoint(16).with_operator("op", {VALUE: [("a", 1)], MAP: [("a", "u", "x")]}).write(path)
    reader = SavepointReader.read(path)
    entries = reader.read_keyed_state("no-such-operator", "v")
    with pytest.raises(StateNotFoundError):
        next(entries)
    [entry] = reader.read_keyed_state("op", "v")
    assert type(entry) is KeyedStateEntry and entry == KeyedStateEntry("a", None, 1, None) and entry.value == 1
    [mapped] = reader.read_keyed_state("op", "m")
    assert type(mapped) is MapStateEntry and (mapped.user_key, mapped.value, mapped.namespace) == ("u", "x", None)
