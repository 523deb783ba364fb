"""The canonical view of a native snapshot: what canonical readers read in its place.

A native statekit snapshot (an incremental RocksDB checkpoint, or a ``--format native``
savepoint) keeps keyed state as RocksDB store files. :func:`canonical_view` presents it as a
canonical :class:`~statekit.readers.snapshot.Snapshot` — same operators, states, key-group
ranges and entries, one canonical keyed file per subtask and state — so that
``read_keyed_state``, ``inspect``, ``export``, ``diff`` and ``rescale`` read it unchanged.

The view is built by :func:`statekit.statefmt.native_canonical.canonical_copy`: the stores are
opened read-only with rocksdict, entries are streamed one key group at a time into files of a
private scratch directory (memory bounded by a key group, the rest on disk), and the snapshot
itself is never written. The scratch directory belongs to the view: :meth:`NativeView.close`
removes it (also done when the view is garbage collected or the interpreter exits, and at
once when building the view fails).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from statekit.readers.snapshot import Snapshot
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.native_canonical import CanonicalCopy, canonical_copy

__all__ = ["NativeView", "canonical_view", "is_native"]


def is_native(snapshot: Snapshot) -> bool:
    """Whether any subtask of the snapshot keeps its keyed state natively."""
    return any(st.native is not None for op in snapshot.metadata.operators for st in op.subtasks)


@dataclass(frozen=True)
class NativeView(Snapshot):
    """A canonical snapshot standing in for the native snapshot ``source``.

    ``url`` is the source's (messages name the snapshot the user gave, not the scratch copy).
    """

    source: Snapshot = field(compare=False)
    copy: CanonicalCopy = field(compare=False, repr=False)

    @property
    def url(self) -> str:
        return self.source.url

    def close(self) -> None:
        """Remove the view's scratch files (idempotent)."""
        self.copy.close()


def canonical_view(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` itself when it is canonical, else its canonical view (see the module).

    Raises:
        BadInputError: rocksdict is not installed, or a store's format is unknown.
        CorruptStateError: A store file differs from ``_metadata`` or does not open or read.
        UnsafePathError / PathNotFoundError: A file ``_metadata`` names leads outside the
            snapshot directory (and its job's ``shared/``) or is missing.
    """
    if not is_native(snapshot):
        return snapshot
    copy = canonical_copy(snapshot.io, snapshot.file_path, snapshot.metadata, snapshot.url)
    io, directory = FileIO.for_path(copy.directory)
    return NativeView(io=io, directory=directory, metadata=copy.metadata, source=snapshot, copy=copy)
