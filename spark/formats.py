"""The file formats of tables statekit writes through Spark: one function writes a table.

Every Spark output of statekit (``statekit export --format``, the Spark diff's ``-o``) is a
new directory of ``part-*`` files written by :func:`write_table`:

* ``parquet`` (default): the columns as typed, timestamps as ``TIMESTAMP_MICROS``;
* ``csv``: one header line per file, RFC 4180 quoting (a ``"`` inside a value is doubled),
  leading and trailing white space kept (Spark would trim it);
  a struct, list or map column becomes its JSON text, a binary column base64 text, a
  timestamp ISO-8601 text in UTC (``2024-05-01T12:00:00.000000Z``); an empty string is
  ``""``, a null is an empty field;
* ``jsonl``: JSON Lines (``part-*.json``), one object per row with every column (nulls
  included); structs, lists and maps stay nested; binary and timestamps as in CSV.

pyspark is imported only inside the functions.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructField

__all__ = ["FORMATS", "DEFAULT_FORMAT", "check_format", "write_table", "count_rows"]

# ISO-8601 with microseconds; the session's time zone is UTC, so the offset is written "Z".
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


@dataclass(frozen=True)
class _Format:
    source: str  # Spark's name of the data source
    suffix: str  # of the part files Spark writes
    options: Mapping[str, str]


_FORMATS = {
    "parquet": _Format("parquet", ".parquet", {}),
    # Spark trims leading and trailing white space of CSV values by default when writing: kept here
    "csv": _Format("csv", ".csv", {"header": "true", "escape": '"', "timestampFormat": TIMESTAMP_FORMAT,
                                   "ignoreLeadingWhiteSpace": "false", "ignoreTrailingWhiteSpace": "false"}),
    "jsonl": _Format("json", ".json", {"ignoreNullFields": "false", "timestampFormat": TIMESTAMP_FORMAT}),
}
FORMATS = tuple(_FORMATS)
DEFAULT_FORMAT = "parquet"


def check_format(fmt: str) -> str:
    """``fmt`` when it is one of :data:`FORMATS`; else bad input naming the choices."""
    if fmt not in FORMATS:
        raise BadInputError(f"unsupported export format {fmt!r} (supported: {', '.join(FORMATS)})")
    return fmt


def write_table(frame: DataFrame, target: str, fmt: str = DEFAULT_FORMAT) -> None:
    """Write ``frame`` as the new directory ``target`` in format ``fmt`` (it must not exist)."""
    if check_format(fmt) == "csv":
        frame = frame.select(*[_csv_column(field) for field in frame.schema.fields])
    spec = _FORMATS[fmt]
    frame.write.mode("error").format(spec.source).options(**spec.options).save(target)


def _csv_column(field: StructField) -> Column:
    """A column CSV can hold: nested types as JSON text, binary as base64, the rest as is."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StructType

    column = F.col(f"`{field.name}`")
    if isinstance(field.dataType, (StructType, ArrayType, MapType)):
        return F.to_json(column, {"timestampFormat": TIMESTAMP_FORMAT}).alias(field.name)
    if isinstance(field.dataType, BinaryType):
        return F.base64(column).alias(field.name)
    return column


def count_rows(directory: str, fmt: str) -> tuple[int, int]:
    """(rows, files) of a table :func:`write_table` wrote to the local ``directory``."""
    files = [os.path.join(directory, f) for f in sorted(os.listdir(directory))
             if f.startswith("part-") and f.endswith(_FORMATS[fmt].suffix)]
    return sum(_rows_in(path, fmt) for path in files), len(files)


def _rows_in(path: str, fmt: str) -> int:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    if fmt == "jsonl":
        return sum(chunk.count(b"\n") for chunk in _chunks(path))
    with open(path, encoding="utf-8", newline="") as f:
        return max(0, sum(1 for _ in csv.reader(f)) - 1)  # less the header line


def _chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            yield chunk
