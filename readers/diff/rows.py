"""Differing entries as rows (:func:`diff_arrow_schema`): what :class:`DifferenceSink` keeps as examples and hands to the caller's output."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from statekit.readers.diff.plan import StatePair
from statekit.readers.diff.results import KeyDifference
from statekit.readers.diff.spec import DifferenceWriter
from statekit.readers.typed_columns import python_values, to_json_text
from statekit.readers.window_state import window_of_namespace, window_state_role
from statekit.statefmt.entries import StateCodec

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DIFF_COLUMNS", "DifferenceSink", "diff_arrow_schema"]


DIFF_COLUMNS = ("change", "key", "namespace", "user_key", "value_a", "value_b", "key_group")


class DifferenceSink:
    """Collects differing entries of one state: the first ``limit`` decoded, all to ``writer``
    (as JSON text columns and the key group, :func:`diff_arrow_schema`)."""

    def __init__(self, pair: StatePair, codec_a: StateCodec | None, codec_b: StateCodec | None, *,
                 limit: int, writer: DifferenceWriter | None, max_parallelism: int) -> None:
        self.pair = pair
        self.codec_a, self.codec_b = codec_a, codec_b
        self.limit = limit
        self.writer = writer
        self.max_parallelism = max_parallelism
        self.examples: list[KeyDifference] = []
        ops = [op for op in (pair.op_a, pair.op_b) if op is not None]
        self.window_state = pair.name if ops and all(window_state_role(op, pair.name) for op in ops) else None

    @property
    def wanted(self) -> bool:
        return self.writer is not None or len(self.examples) < self.limit

    def add(self, rows: pa.Table) -> None:
        """Rows with binary key, namespace, user_key, value_a, value_b, key_hash and a change column."""
        if not rows.num_rows or not self.wanted:
            return
        if self.writer is None:
            rows = rows.slice(0, self.limit - len(self.examples))
        texts = self._json_columns(rows)
        if len(self.examples) < self.limit:
            take = min(self.limit - len(self.examples), rows.num_rows)
            for i in range(take):
                example = KeyDifference(
                    texts["change"][i], *(_loads(texts[c][i]) for c in ("key", "namespace", "user_key", "value_a", "value_b")))
                self.examples.append(self._with_window(example))
        if self.writer is not None:
            import pyarrow as pa
            import pyarrow.compute as pc

            key_group = pc.remainder(rows.column("key_hash"), pa.scalar(self.max_parallelism, rows.column("key_hash").type))
            self.writer.write_table(pa.table(
                {**{c: pa.array(texts[c], pa.string()) for c in DIFF_COLUMNS[:-1]},
                 "key_group": key_group.cast(pa.int32())}))

    def _with_window(self, example: KeyDifference) -> KeyDifference:
        """A window state's entry belongs to one (key, window): name the window its namespace holds."""
        if self.window_state is None:
            return example
        codec = self.codec_a if example.change == "only_in_a" else self.codec_b or self.codec_a
        window = window_of_namespace(self.window_state, example.namespace, codec.source if codec else None)
        return dataclasses.replace(example, window=None if window is None else list(window))

    def _json_columns(self, rows: pa.Table) -> dict[str, list[Any]]:
        codec = self.codec_a or self.codec_b
        assert codec is not None
        out: dict[str, list[Any]] = {"change": rows.column("change").to_pylist()}
        out["key"] = _texts(rows.column("key"), codec.key)
        out["namespace"] = [None if not raw else to_json_text(codec.decode_namespace(raw))
                            for raw in rows.column("namespace").to_pylist()]
        out["user_key"] = _texts(rows.column("user_key"), codec.user_key)
        out["value_a"] = _value_texts(rows.column("value_a"), self.codec_a)
        out["value_b"] = _value_texts(rows.column("value_b"), self.codec_b)
        return out


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _texts(column: Any, serializer: Any) -> list[str | None]:
    column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    if serializer is None:
        return [None] * len(column)
    return [to_json_text(v) for v in python_values(column, serializer, "entry")]


def _value_texts(column: Any, codec: StateCodec | None) -> list[str | None]:
    if codec is None:
        return [None] * len(column)
    column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    return [None if v is None else to_json_text(v) for v in codec.decode_values(column)]


def diff_arrow_schema() -> pa.Schema:
    """The columns of the differing entries handed to a :class:`DifferenceWriter`."""
    import pyarrow as pa

    return pa.schema([(c, pa.string()) for c in DIFF_COLUMNS[:-1]] + [("key_group", pa.int32())])
