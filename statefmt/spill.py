"""Scratch space of one process: Arrow record batches parked in temporary files by bucket.

A join or a sort that does not fit the memory budget parks its rows here and takes them
back bucket by bucket. Invariants: the files live in a fresh private directory under the
system's temporary directory (never beside a snapshot or an output, never read by anyone
else); :meth:`ArrowSpill.close` removes that directory whole, also after a failure (use the
spill as a context manager).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ArrowSpill"]


class ArrowSpill:
    """Batches of one schema appended to, and read back from, one Arrow IPC stream per bucket."""

    def __init__(self, schema: pa.Schema, prefix: str = "statekit-spill-") -> None:
        self.schema = schema
        self.directory = tempfile.mkdtemp(prefix=prefix)
        self._writers: dict[str, Any] = {}
        self._sinks: dict[str, Any] = {}

    def __enter__(self) -> ArrowSpill:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def append(self, bucket: str, batch: pa.RecordBatch) -> None:
        """Add ``batch`` to ``bucket`` (a file-name-safe label)."""
        self._writer(bucket).write_batch(batch)

    def _writer(self, bucket: str) -> Any:
        import pyarrow as pa

        if bucket not in self._writers:
            sink = pa.OSFile(self._path(bucket), "wb")
            self._sinks[bucket] = sink
            self._writers[bucket] = pa.ipc.new_stream(sink, self.schema)
        return self._writers[bucket]

    def finish(self) -> None:
        """Close every bucket for appending; :meth:`load` needs this first."""
        for bucket, writer in self._writers.items():
            writer.close()
            self._sinks[bucket].close()
        self._writers.clear()
        self._sinks.clear()

    def load(self, bucket: str) -> pa.Table:
        """Everything appended to ``bucket``, in order (an empty table for a bucket never used)."""
        import pyarrow as pa

        path = self._path(bucket)
        if not os.path.exists(path):
            return self.schema.empty_table()
        with pa.OSFile(path, "rb") as source:
            return pa.ipc.open_stream(source).read_all()

    def close(self) -> None:
        """Remove every spilled file and the directory."""
        for sink in self._sinks.values():
            sink.close()
        self._writers.clear()
        self._sinks.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _path(self, bucket: str) -> str:
        return os.path.join(self.directory, f"{bucket}.arrow")
