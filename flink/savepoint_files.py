"""The files a rewritten Flink savepoint keeps from its source, under relative names.

A rewrite (rescale, modify) writes a self-contained savepoint directory: every file its
``_metadata`` references lies in that directory and is named by a relative file handle, as
Flink writes canonical and native savepoints. State the rewrite does not change (operator
state, untouched keyed state) keeps its bytes; only its file moves:

* a relative handle keeps its name and bytes: the file is copied under the same name;
* an absolute handle to a file inside the source directory becomes a relative handle
  (an :class:`~statekit.flink.metadata_writer.Edit` of ``_metadata``), the file copied under
  its base name (prefixed when two files share one);
* inlined streams stay in ``_metadata``.

A file outside the source directory (a checkpoint's ``shared/`` files, paths of another
machine) is refused: the output would not be self-contained.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from statekit.flink.metadata_writer import Edit, encode_relative_file_handle
from statekit.flink.model import StreamHandle, StreamHandleKind
from statekit.flink.storage import FileLocation, FlinkSnapshot, resolve_stream
from statekit.statefmt.errors import CorruptStateError, UnsafePathError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.paths import check_relative_path

__all__ = ["CarriedFiles"]

COPY_CHUNK = 8 << 20


@dataclass
class CarriedFiles:
    """Source files a rewritten savepoint keeps, by their relative name in the output.

    Attributes:
        snapshot: The source.
        files: ``{relative name: (source file, recorded size)}``.
        edits: ``_metadata`` edits that turn absolute handles into relative ones.
    """

    snapshot: FlinkSnapshot
    files: dict[str, tuple[FileLocation, int]] = field(default_factory=dict)
    edits: list[Edit] = field(default_factory=list)
    _names: dict[tuple[str, str], str] = field(default_factory=dict)

    def carry(self, handle: StreamHandle, metadata: bytes) -> None:
        """Keep the file of a stream handle (nothing for inlined bytes).

        Raises:
            UnsafePathError: A file outside the source directory, or a relative path that escapes it.
        """
        if handle.kind is StreamHandleKind.KEY_GROUPS:
            for leaf in handle.leaves():
                self.carry(leaf, metadata)
            return
        if handle.kind is StreamHandleKind.BYTE_STREAM:
            return
        location = resolve_stream(self.snapshot, handle)
        root = self.snapshot.directory
        if location.protocol != root.protocol or not location.path.startswith(root.path.rstrip("/") + "/"):
            raise UnsafePathError("lies outside the savepoint directory: the rewritten savepoint would not be "
                                  "self-contained (take a savepoint; a checkpoint's shared files stay with its job)",
                                  path=location.url)
        if handle.kind is StreamHandleKind.RELATIVE_FILE:
            assert handle.path is not None
            check_relative_path(handle.path, source=self.snapshot.metadata_path)
            self.files[handle.path] = (location, handle.size)
            return
        name = self._name_for(location)
        self.files[name] = (location, handle.size)
        assert handle.path_offset is not None
        end = handle.path_offset + 2 + int.from_bytes(metadata[handle.path_offset:handle.path_offset + 2], "big")
        self.edits.append(Edit(handle.offset, end, encode_relative_file_handle(name, handle.size)))

    def _name_for(self, location: FileLocation) -> str:
        key = (location.protocol, location.path)
        if key not in self._names:
            name = posixpath.basename(location.path)
            if name in self.files or name in self._names.values():
                name = f"{uuid.uuid4().hex[:8]}-{name}"
            self._names[key] = name
        return self._names[key]

    @property
    def bytes(self) -> int:
        """Recorded bytes of the kept files."""
        return sum(size for _, size in self.files.values())

    def copy_to(self, io: FileIO, directory: str, on_file: Callable[[str, int], None]) -> int:
        """Copy every kept file into ``directory``; the bytes copied.

        Raises:
            CorruptStateError: A file whose size is not the one its handle records (names it).
        """
        total = 0
        for name, (location, size) in sorted(self.files.items()):
            target = posixpath.join(directory, name)
            io.makedirs(posixpath.dirname(target))
            _copy_sized(location, io, target, size)
            total += size
            on_file(name, size)
        return total


def _copy_sized(location: FileLocation, io: FileIO, target: str, size: int) -> None:
    """Copy a file that must hold ``size`` bytes (reads at most one byte more to tell a longer one)."""
    copied = 0
    with location.io.open_input(location.path) as source, io.open_output(target) as out:
        while copied <= size and (chunk := source.read(min(COPY_CHUNK, size + 1 - copied))):
            copied += len(chunk)
            out.write(chunk)
        if copied != size:  # raised inside: the output is abandoned, never published
            held = f"more than {size}" if copied > size else str(copied)
            raise CorruptStateError(f"{held} bytes, _metadata records {size} (truncated or replaced)",
                                    path=location.url)
