"""Copy an operator of one snapshot into a snapshot being built: file by file, verified.

Files are renamed to the canonical layout of the new snapshot
(``<uid>/<state>/<i>-of-<p>.sks``). Before a byte is copied each file is opened as its subtask's
file of its state (kind, key-group range, entry count, and the whole-file CRC-32 its header,
index and footer give); the copy then checks the size and whole-file CRC-32 that ``_metadata``
recorded while the bytes stream through (nothing is decoded). A subtask's in-flight records (an unaligned
checkpoint's channel-state file) are copied too, checked
(:func:`statekit.writers.in_flight.copy_channel_file`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import OperatorMetadata
from statekit.writers.in_flight import copy_channel_file
from statekit.writers.state_writer import copy_state_file

__all__ = ["copy_operator"]


def copy_operator(
    reader: SavepointReader,
    op: OperatorMetadata,
    io: FileIO,
    directory: str,
    *,
    on_bytes: Callable[[str, int], None] | None = None,
) -> OperatorMetadata:
    """Copy every file of ``op`` from ``reader``'s snapshot; returns the operator's new metadata.

    Raises:
        CorruptStateError: A file that is not the one ``_metadata`` describes (another state's or
            subtask's, resized, damaged); the copy is then abandoned.
        BadInputError: Native keyed state (copy it from the snapshot's canonical view).
    """
    snapshot = reader.snapshot
    subtasks = []
    for st in op.subtasks:
        if st.native is not None:
            raise BadInputError(f"operator {op.uid!r} keeps native keyed state; its files are copied from the "
                                "snapshot's canonical view (SavepointReader.canonical())", path=reader.path)
        files = []
        for f in st.files:
            relative = layout.state_file_path(op.uid, f.state, st.index, op.parallelism)
            with reader.open_subtask_file(op, st, f):
                pass  # header, index and footer agree with _metadata; the copy checks every byte
            files.append(copy_state_file(snapshot.io, snapshot.file_path(f.path), io, directory, relative, f))
            if on_bytes:
                on_bytes(f.path, f.size)
        channel = copy_channel_file(reader, op, st, io, directory)
        subtasks.append(replace(st, files=tuple(files), channel_state=channel))
    return replace(op, subtasks=tuple(subtasks))
