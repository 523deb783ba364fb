"""The files of a table written on this machine (the local export engine), laid out and
spelled as :func:`statekit.spark.formats.write_table` has Spark write them. Imports no pyspark.

A table is a new directory of ``part-NNNNN-<uuid>-c000<suffix>`` files and an empty
``_SUCCESS`` marker; a new file starts every :data:`ROWS_PER_FILE` rows (Spark's
``maxRecordsPerFile``), and a table without rows still gets one file (Parquet: the schema
alone; CSV: the header line; JSON Lines: empty). Per format (the Spark options of
:mod:`statekit.spark.formats`):

* ``parquet``: Snappy, timestamps ``TIMESTAMP_MICROS`` in UTC, lists as three-level
  ``element`` lists (pyarrow's compliant nested types, as Spark writes them);
* ``csv``: a header line; a field is quoted when it holds ``,``, ``"``, CR or LF (a ``"``
  doubled), an empty string is ``""``, a null an empty field; a struct, list or map is its
  JSON text (null struct fields left out, as Spark's ``to_json`` does), binary base64,
  a timestamp ``2024-05-01T12:00:00.000000Z``, a double as Java's ``Double.toString``
  (``0.5``, ``1.0E20``);
* ``jsonl``: one compact JSON object per line with every column (nulls included, also
  inside structs), binary and timestamps as in CSV, ``NaN`` and infinities as strings
  (Jackson's defaults).
"""

from __future__ import annotations

import base64
import json
import math
import os
import struct
import uuid
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from statekit.spark.formats import check_format

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["ROWS_PER_FILE", "TableFiles", "spark_arrow_schema", "java_double", "java_float"]

ROWS_PER_FILE = 1 << 22
ROW_GROUP_ROWS = 1 << 20  # rows a Parquet row group collects before it is written
SUCCESS_FILE = "_SUCCESS"
_SUFFIX = {"parquet": ".snappy.parquet", "csv": ".csv", "jsonl": ".json"}

Cell = Callable[[Any], str]


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Spark writes it: every timestamp (also nested) in microseconds, UTC (a
    timestamp without a zone, Spark's ``timestamp_ntz``, stays without one)."""
    import pyarrow as pa

    return pa.schema([f.with_type(_micros(f.type)) for f in schema])


def _micros(t: pa.DataType) -> pa.DataType:
    import pyarrow as pa

    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_map(t):
        return pa.map_(_micros(t.key_type), _micros(t.item_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_micros(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_micros(t.field(i).type)) for i in range(t.num_fields)])
    return t


def _epoch(t: pa.DataType) -> pa.DataType:
    """``t`` with every timestamp as int64 epoch microseconds (cheap to read into Python)."""
    import pyarrow as pa

    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_map(t):
        return pa.map_(_epoch(t.key_type), _epoch(t.item_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_epoch(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_epoch(t.field(i).type)) for i in range(t.num_fields)])
    return t


class TableFiles:
    """One table's directory: ``write`` batches of ``schema``, ``close`` returns (rows, files).

    The directory must not exist (it is created here); the caller stages and publishes it.
    """

    def __init__(self, directory: str, schema: pa.Schema, fmt: str) -> None:
        self.directory = directory
        self.schema = spark_arrow_schema(schema)
        self.fmt = check_format(fmt)
        self.rows = 0
        self.files = 0
        self._job = str(uuid.uuid4())
        self._in_file = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._parquet: pq.ParquetWriter | None = None
        self._text: IO[str] | None = None
        self._encode = _row_encoder(self.schema, fmt) if fmt != "parquet" else None
        os.makedirs(directory)

    def __enter__(self) -> TableFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_file()

    def write(self, batch: pa.RecordBatch) -> None:
        """Append ``batch`` (its columns cast to the table's schema)."""
        import pyarrow as pa

        batch = pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in self.schema],
                                           schema=self.schema)
        while batch.num_rows:
            if self._in_file == ROWS_PER_FILE:
                self._close_file()
            take = min(batch.num_rows, ROWS_PER_FILE - self._in_file)
            self._append(batch.slice(0, take))
            batch = batch.slice(take)

    def close(self) -> tuple[int, int]:
        """Finish the last file (or write the one file of an empty table) and ``_SUCCESS``."""
        if self.files == 0:
            self._open_file()
        self._close_file()
        with open(os.path.join(self.directory, SUCCESS_FILE), "wb"):
            pass
        return self.rows, self.files

    def _append(self, batch: pa.RecordBatch) -> None:
        if self._parquet is None and self._text is None:
            self._open_file()
        self._in_file += batch.num_rows
        self.rows += batch.num_rows
        if self._text is not None:
            assert self._encode is not None
            self._text.write(self._encode(batch))
            return
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush_row_group()

    def _open_file(self) -> None:
        name = f"part-{self.files:05d}-{self._job}-c000{_SUFFIX[self.fmt]}"
        path = os.path.join(self.directory, name)
        self.files += 1
        self._in_file = 0
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            self._parquet = pq.ParquetWriter(path, self.schema, compression="snappy", coerce_timestamps="us")
            return
        self._text = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115 - closed by _close_file
        if self.fmt == "csv":
            self._text.write(",".join(_quote(f.name) for f in self.schema) + "\n")

    def _flush_row_group(self) -> None:
        import pyarrow as pa

        if self._pending and self._parquet is not None:
            self._parquet.write_table(pa.Table.from_batches(self._pending, schema=self.schema),
                                      row_group_size=ROW_GROUP_ROWS)
        self._pending, self._pending_rows = [], 0

    def _close_file(self) -> None:
        if self._parquet is not None:
            self._flush_row_group()
            self._parquet.close()
            self._parquet = None
        if self._text is not None:
            self._text.close()
            self._text = None


# ---------------------------------------------------------------- text formats


def _row_encoder(schema: pa.Schema, fmt: str) -> Callable[[pa.RecordBatch], str]:
    """A function from a batch to its lines in ``fmt`` (csv or jsonl)."""
    if fmt == "csv":
        cells = [_csv_column(f.type) for f in schema]

        def csv_lines(batch: pa.RecordBatch) -> str:
            columns = [cell(batch.column(i)) for i, cell in enumerate(cells)]
            return "".join(",".join(row) + "\n" for row in zip(*columns))

        return csv_lines
    names = [json.dumps(f.name, ensure_ascii=False) + ":" for f in schema]
    values = [_json_column(f.type) for f in schema]

    def json_lines(batch: pa.RecordBatch) -> str:
        columns = [value(batch.column(i)) for i, value in enumerate(values)]
        return "".join("{" + ",".join(n + v for n, v in zip(names, row)) + "}\n" for row in zip(*columns))

    return json_lines


def _quote(text: str) -> str:
    """A CSV field: quoted when it holds a delimiter, a quote or a line break; ``""`` when empty."""
    if not text:
        return '""'
    if "," in text or '"' in text or "\n" in text or "\r" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def _csv_column(t: pa.DataType) -> Callable[[pa.Array], list[str]]:
    """The CSV fields of a column of type ``t`` (a null is an empty field)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(t):
        def timestamps(column: pa.Array) -> list[str]:
            if t.tz:
                text = pc.strftime(column.cast(pa.timestamp("us", tz="UTC")), format="%Y-%m-%dT%H:%M:%SZ")
            else:  # timestamp_ntz: a wall-clock time in milliseconds, no zone (Spark's timestampNTZFormat)
                text = pc.strftime(pc.cast(column, pa.timestamp("ms", tz="UTC"), safe=False),
                                   format="%Y-%m-%dT%H:%M:%S")
            return [v if v is not None else "" for v in text.to_pylist()]

        return timestamps
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        def plain(column: pa.Array) -> list[str]:
            return [v if v is not None else "" for v in column.cast(pa.string()).to_pylist()]

        return plain
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        def strings(column: pa.Array) -> list[str]:
            return ["" if v is None else _quote(v) for v in column.to_pylist()]

        return strings
    scalar = _scalar_text(t)
    if scalar is not None:
        def scalars(column: pa.Array) -> list[str]:
            return ["" if v is None else _quote(scalar(v)) for v in column.to_pylist()]

        return scalars
    nested = _json_value(t, ignore_null_fields=True)
    epoch = _epoch(t)

    def json_text(column: pa.Array) -> list[str]:
        return ["" if v is None else _quote(nested(v)) for v in column.cast(epoch).to_pylist()]

    return json_text


def _json_column(t: pa.DataType) -> Callable[[pa.Array], list[str]]:
    """The JSON texts of a column of type ``t`` (``null`` for a null)."""
    import pyarrow as pa

    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        def plain(column: pa.Array) -> list[str]:
            return [v if v is not None else "null" for v in column.cast(pa.string()).to_pylist()]

        return plain
    value = _json_value(t, ignore_null_fields=False)
    epoch = _epoch(t)

    def texts(column: pa.Array) -> list[str]:
        return ["null" if v is None else value(v) for v in column.cast(epoch).to_pylist()]

    return texts


def _scalar_text(t: pa.DataType) -> Cell | None:
    """How a non-nested, non-integer value of type ``t`` is spelled as text (CSV, JSON strings)."""
    import pyarrow as pa

    if pa.types.is_float64(t):
        return java_double
    if pa.types.is_float32(t) or pa.types.is_float16(t):
        return java_float
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _base64
    if pa.types.is_timestamp(t):
        return _timestamp_text if t.tz else _wall_clock_text
    return None


def _json_value(t: pa.DataType, *, ignore_null_fields: bool) -> Cell:
    """JSON text of a (non-null) Python value of type ``_epoch(t)``, as Spark's Jackson writes it."""
    import pyarrow as pa

    def of(inner: pa.DataType) -> Cell:
        return _json_value(inner, ignore_null_fields=ignore_null_fields)

    def nullable(cell: Cell) -> Cell:
        return lambda v: "null" if v is None else cell(v)

    if pa.types.is_boolean(t):
        return lambda v: "true" if v else "false"
    if pa.types.is_integer(t):
        return str
    if pa.types.is_floating(t):
        text = java_double if pa.types.is_float64(t) else java_float
        return lambda v: text(v) if math.isfinite(v) else '"' + text(v) + '"'
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _json_string
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return lambda v: '"' + _base64(v) + '"'
    if pa.types.is_timestamp(t):
        stamp = _timestamp_text if t.tz else _wall_clock_text
        return lambda v: '"' + stamp(v) + '"'
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = nullable(of(t.value_type))
        return lambda v: "[" + ",".join(element(e) for e in v) + "]"
    if pa.types.is_map(t):
        key, item = _map_key(t.key_type), nullable(of(t.item_type))
        return lambda v: "{" + ",".join(_json_string(key(k)) + ":" + item(x) for k, x in v) + "}"
    if pa.types.is_struct(t):
        fields = [(_json_string(t.field(i).name) + ":", nullable(of(t.field(i).type))) for i in range(t.num_fields)]
        names = [t.field(i).name for i in range(t.num_fields)]
        if ignore_null_fields:
            return lambda v: "{" + ",".join(n + c(v[k]) for (n, c), k in zip(fields, names) if v[k] is not None) + "}"
        return lambda v: "{" + ",".join(n + c(v[k]) for (n, c), k in zip(fields, names)) + "}"
    return lambda v: _json_string(str(v))


def _map_key(t: pa.DataType) -> Cell:
    """A map key as JSON names it (the key's text)."""
    import pyarrow as pa

    if pa.types.is_boolean(t):
        return lambda v: "true" if v else "false"
    scalar = _scalar_text(t)
    return scalar if scalar is not None else str


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _wall_clock_text(micros: Any) -> str:
    """A timestamp without a zone (``timestamp_ntz``) as Spark's ``timestampNTZFormat`` writes
    it: ``2024-05-01T12:00:00.000`` (milliseconds)."""
    text = _timestamp_text(micros)  # ...:00.000000Z
    return text[:-4]


def _timestamp_text(micros: Any) -> str:
    """Epoch microseconds (or a datetime) as ``2024-05-01T12:00:00.000000Z``."""
    import datetime as dt

    if isinstance(micros, dt.datetime):
        moment = micros.astimezone(dt.timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    seconds, fraction = divmod(int(micros), 1_000_000)
    moment = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{fraction:06d}Z"


# ---------------------------------------------------------------- Java's number spelling

_F32 = struct.Struct("<f")


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` spells it: the shortest digits that read back,
    plain between 10^-3 and 10^7 (``100.0``, ``0.001``), else ``d.dddE±n`` (``1.0E20``)."""
    return _java_decimal(value, repr)


def java_float(value: float) -> str:
    """``value`` as Java's ``Float.toString`` spells it (the shortest digits of the float32)."""
    def shortest(v: float) -> str:
        stored = _F32.unpack(_F32.pack(v))[0]
        for digits in range(1, 10):
            text = f"{stored:.{digits}g}"
            if _F32.unpack(_F32.pack(float(text)))[0] == stored:
                return text
        return repr(stored)

    return _java_decimal(value, shortest)


def _java_decimal(value: float, shortest: Callable[[float], str]) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = shortest(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)  # digits before the decimal point
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"
