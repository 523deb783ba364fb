"""``verify``: every size and checksum of a snapshot, reported rather than raised.

Every file ``_metadata`` names is checked: canonical state files (size, file CRC, index, every
block), channel-state files (in-flight records) and the files of native keyed state — a
RocksDB store's private files and the SST files it names in its job's ``shared/`` (size and
CRC-32 of the bytes; a file several subtasks name is read once).

A damaged or missing state file is a finding (exit 1); a snapshot whose ``_metadata``
cannot be read at all is bad input (raised, exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from statekit.readers.progress import Advance
from statekit.readers.snapshot import Snapshot, open_snapshot
from statekit.statefmt import layout
from statekit.statefmt.errors import CorruptStateError, PathNotFoundError, StatekitError
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.statefile import verify_state_stream

__all__ = ["Damage", "VerifyReport", "verify_snapshot"]


@dataclass(frozen=True)
class Damage:
    path: str
    key_group: int | None
    message: str


@dataclass
class VerifyReport:
    json_shape: ClassVar[JsonShape] = JsonShape(rename={"damage": "problems"}, extra=("engine", "ok"))

    path: str
    files: int = 0
    blocks: int = 0
    bytes: int = 0
    damage: list[Damage] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damage

    @property
    def engine(self) -> str:
        """``statekit``: the snapshot's engine (``flink`` in the documents of Flink snapshots)."""
        return "statekit"


def verify_snapshot(
    url: str,
    *,
    storage_options: dict[str, Any] | None = None,
    on_file: Advance | None = None,
) -> VerifyReport:
    """Check every file the metadata names: presence, size, file CRC, index and block CRCs.

    Args:
        on_file: called with (path, size) after each file (progress display).
    """
    snapshot = open_snapshot(url, storage_options=storage_options)
    report = VerifyReport(path=snapshot.url)
    checks = {
        id(file): (layout.FILE_KIND_KEYED, subtask.key_group_range) if op.state(file.state).keyed
        else (layout.FILE_KIND_OPERATOR, None)
        for op in snapshot.metadata.operators for subtask in op.subtasks for file in subtask.files
    }
    for file in snapshot.metadata.files():
        shown = snapshot.io.url(snapshot.file_path_unchecked(file.path))
        report.files += 1
        kind, key_groups = checks[id(file)]
        try:
            path = snapshot.file_path(file.path)
            with snapshot.io.open_input(path) as stream:
                problems, blocks = verify_state_stream(stream, shown, file.size, file.checksum,
                                                       kind=kind, key_groups=key_groups, entries=file.entries)
            report.blocks += blocks
        except PathNotFoundError:
            problems = [CorruptStateError("missing: named in _metadata but not present", path=shown)]
        except StatekitError as exc:  # unsafe symlink, not a regular file
            problems = [CorruptStateError(_cause_of(exc, shown), path=shown)]
        except OSError as exc:
            problems = [CorruptStateError(f"cannot be read: {exc.strerror or exc}", path=shown)]
        report.bytes += file.size
        report.damage.extend(Damage(shown, p.key_group, _cause(p)) for p in problems)
        if on_file:
            on_file(shown, file.size)
    _verify_channel_files(snapshot, report, on_file)
    _verify_native_files(snapshot, report, on_file)
    return report


def _verify_channel_files(snapshot: Snapshot, report: VerifyReport, on_file: Advance | None) -> None:
    """Check every channel-state file (in-flight records of an unaligned checkpoint): presence,
    size, checksums, structure; pickle records are checked structurally, never decoded."""
    from statekit.statefmt.channel_state import verify_channel_state

    for file in snapshot.metadata.channel_files():
        shown = snapshot.io.url(snapshot.file_path_unchecked(file.path))
        report.files += 1
        try:
            with snapshot.io.open_input(snapshot.file_path(file.path)) as stream:
                data = stream.read(file.size + 1)
            problems = verify_channel_state(data, path=shown, expected=file)
        except PathNotFoundError:
            problems = [CorruptStateError("missing: named in _metadata but not present", path=shown)]
        except StatekitError as exc:
            problems = [CorruptStateError(_cause_of(exc, shown), path=shown)]
        except OSError as exc:
            problems = [CorruptStateError(f"cannot be read: {exc.strerror or exc}", path=shown)]
        report.bytes += file.size
        report.damage.extend(Damage(shown, p.key_group, _cause(p)) for p in problems)
        if on_file:
            on_file(shown, file.size)


def _verify_native_files(snapshot: Snapshot, report: VerifyReport, on_file: Advance | None) -> None:
    """Check every file of native keyed state, private or in the job's ``shared/``: presence,
    size, CRC-32 (what ``_metadata`` recorded when the store's file was uploaded)."""
    from statekit.statefmt.native_store import check_store_file

    seen: set[str] = set()
    for file in snapshot.metadata.native_files():
        shown = snapshot.io.url(snapshot.file_path_unchecked(file.path))
        if shown in seen:
            continue
        seen.add(shown)
        report.files += 1
        try:
            check_store_file(snapshot.io, snapshot.file_path(file.path), file)
            problems = []
        except PathNotFoundError:
            problems = [CorruptStateError("missing: named in _metadata but not present", path=shown)]
        except CorruptStateError as exc:
            problems = [exc]
        except StatekitError as exc:
            problems = [CorruptStateError(_cause_of(exc, shown), path=shown)]
        except OSError as exc:
            problems = [CorruptStateError(f"cannot be read: {exc.strerror or exc}", path=shown)]
        report.bytes += file.size
        report.damage.extend(Damage(shown, p.key_group, _cause(p)) for p in problems)
        if on_file:
            on_file(shown, file.size)


def _cause_of(error: StatekitError, shown: str) -> str:
    text = str(error)
    return text[len(shown) + 2:] if text.startswith(shown + ": ") else text


def _cause(error: CorruptStateError) -> str:
    """The message without the path and key-group prefixes (both are fields of their own)."""
    text = str(error)
    text = text[len(error.path) + 2:] if error.path and text.startswith(error.path + ": ") else text
    prefix = f"key group {error.key_group}: "
    return text[len(prefix):] if error.key_group is not None and text.startswith(prefix) else text
