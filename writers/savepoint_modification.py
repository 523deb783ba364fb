"""``modify``: remove operators or states and rename uids — the answer to Flink's
"Cannot map checkpoint/savepoint state for operator ... to the new program".

Every uid names an operator of the *source* savepoint, and the operations apply together:
states are removed, operators are removed, then uids are renamed simultaneously (so
``--rename-uid a=b --rename-uid b=a`` swaps two uids). Operators are copied file by file
(size and checksum verified while copying), never decoded. The output is a new savepoint,
written whole or not at all; the source is never modified.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from statekit.readers.progress import ProgressFactory, no_progress
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError, StateNotFoundError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.metadata import OperatorMetadata
from statekit.writers.savepoint_writer import SavepointWriter
from statekit.writers.staging import check_output_dir

__all__ = ["ModifyReport", "OperatorSummary", "modify_savepoint", "parse_rename", "parse_state_ref"]


@dataclass(frozen=True)
class OperatorSummary:
    """One operator of the output savepoint."""

    uid: str
    renamed_from: str | None
    parallelism: int
    max_parallelism: int
    states: tuple[str, ...]
    files: int
    bytes: int


@dataclass
class ModifyReport:
    """What ``modify`` did (or, with ``dry_run``, would do)."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("bytes",), digits={"elapsed_s": 3},
                                                records={"removed_states": ("uid", "state"), "renamed": ("from", "uid")})

    source: str
    output: str | None
    dry_run: bool
    removed_operators: list[str] = field(default_factory=list)
    removed_states: list[tuple[str, str]] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    operators: list[OperatorSummary] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def bytes(self) -> int:
        return sum(op.bytes for op in self.operators)


def parse_rename(text: str) -> tuple[str, str]:
    """``OLD=NEW`` -> (old, new)."""
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise BadInputError(f"--rename-uid {text!r}: expected OLD=NEW")
    return old, new


def parse_state_ref(text: str) -> tuple[str, str]:
    """``UID/STATE`` -> (uid, state); the last ``/`` separates them (uids may contain ``/``)."""
    uid, sep, state = text.rpartition("/")
    if not sep or not uid or not state:
        raise BadInputError(f"--remove-state {text!r}: expected UID/STATE")
    return uid, state


def _known(items: Iterable[str]) -> str:
    return ", ".join(repr(i) for i in items) or "none"


def _validate(
    reader: SavepointReader,
    remove_operators: list[str],
    renames: list[tuple[str, str]],
    remove_states: list[tuple[str, str]],
) -> None:
    source = reader.path
    uids = [op.uid for op in reader.operators]

    def missing(uid: str, option: str) -> StateNotFoundError:
        return StateNotFoundError(
            f"{option}: the savepoint has no operator with uid {uid!r} (operators: {_known(uids)})", path=source
        )

    if not (remove_operators or renames or remove_states):
        raise BadInputError("nothing to do: give --remove-operator, --rename-uid or --remove-state", path=source)
    for uid in remove_operators:
        if uid not in uids:
            raise missing(uid, f"--remove-operator {uid}")
    for uid, state in remove_states:
        if uid not in uids:
            raise missing(uid, f"--remove-state {uid}/{state}")
        names = [d.name for d in reader.operator(uid).states]
        if state not in names:
            raise StateNotFoundError(
                f"--remove-state {uid}/{state}: operator {uid!r} has no state {state!r} (states: {_known(names)})",
                path=source,
            )
    olds = [old for old, _ in renames]
    if len(set(olds)) != len(olds):
        raise BadInputError("--rename-uid: an operator is renamed twice", path=source)
    news = [new for _, new in renames]
    if len(set(news)) != len(news):
        raise BadInputError(f"--rename-uid: two operators renamed to the same uid ({_known(news)})", path=source)
    staying = set(uids) - set(remove_operators) - set(olds)
    for old, new in renames:
        if old not in uids:
            raise missing(old, f"--rename-uid {old}={new}")
        if old in remove_operators:
            raise BadInputError(f"--rename-uid {old}={new}: {old!r} is also removed (--remove-operator)", path=source)
        if new in staying:
            raise BadInputError(
                f"--rename-uid {old}={new}: uid {new!r} is taken by another operator "
                f"(remove or rename that one too)", path=source,
            )


def modify_savepoint(
    source: str,
    output: str | None,
    *,
    remove_operators: Iterable[str] = (),
    rename_uids: Iterable[tuple[str, str]] = (),
    remove_states: Iterable[tuple[str, str]] = (),
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
    output_storage_options: dict[str, Any] | None = None,
    progress: ProgressFactory | None = None,
) -> ModifyReport:
    """Write a copy of ``source`` without some operators/states and with some uids renamed.

    Args:
        source: savepoint/checkpoint directory (or its ``_metadata``).
        output: a new directory (must not exist or be empty); optional with ``dry_run``.
        remove_operators: uids to drop.
        rename_uids: ``(old, new)`` pairs, applied simultaneously.
        remove_states: ``(uid, state)`` pairs to drop.
        dry_run: validate and report, write nothing.
        progress: opens a progress bar (``Output.progress``), advanced per copied file.

    Raises:
        StateNotFoundError: a uid or state that the source does not hold (the message lists
            what it holds).
        BadInputError: conflicting operations, nothing to do, output not empty.
    """
    started = time.monotonic()
    reader = SavepointReader.read(source, storage_options=storage_options)
    removed_ops = list(dict.fromkeys(remove_operators))
    renames = list(rename_uids)
    removed_states = list(dict.fromkeys(remove_states))
    _validate(reader, removed_ops, renames, removed_states)
    report = ModifyReport(source=reader.path, output=None, dry_run=dry_run,
                          removed_operators=removed_ops, removed_states=removed_states, renamed=renames)
    if output is not None:
        out_io, out_path = FileIO.for_path(output, output_storage_options)
        check_output_dir(out_io, out_path, [source, reader.path], storage_options)
        report.output = out_io.url(out_path)
    elif not dry_run:
        raise BadInputError("give the output directory (-o OUT)", path=reader.path)
    writer = SavepointWriter.from_existing_savepoint(source, storage_options=storage_options)
    for uid, state in removed_states:
        if uid not in removed_ops:
            writer.remove_state(uid, state)
    for uid in removed_ops:
        writer.remove_operator(uid)
    for i, (old, _) in enumerate(renames):
        writer.change_operator_identifier(old, f"\x00statekit-rename-{i}")
    for i, (_, new) in enumerate(renames):
        writer.change_operator_identifier(f"\x00statekit-rename-{i}", new)
    metadata_ops = _planned_operators(reader, removed_ops, removed_states, renames)
    if output is not None and not dry_run:
        total = sum(op.total_bytes for op in metadata_ops)
        with (progress or no_progress)("copying", total=total) as advance:
            metadata_ops = list(writer.write(output, storage_options=output_storage_options, on_file=advance).operators)
    origin = {new: old for old, new in renames}
    position = {op.uid: i for i, op in enumerate(reader.operators)}
    report.operators = [
        OperatorSummary(op.uid, origin.get(op.uid), op.parallelism, op.max_parallelism,
                        tuple(d.name for d in op.states), sum(len(s.files) for s in op.subtasks), op.total_bytes)
        for op in sorted(metadata_ops, key=lambda op: position[origin.get(op.uid, op.uid)])
    ]
    report.elapsed_s = time.monotonic() - started
    return report


def _planned_operators(
    reader: SavepointReader, removed_ops: list[str], removed_states: list[tuple[str, str]],
    renames: list[tuple[str, str]],
) -> list[OperatorMetadata]:
    from dataclasses import replace

    new_uid = dict(renames)
    out = []
    for op in reader.operators:
        if op.uid in removed_ops:
            continue
        dropped = {state for uid, state in removed_states if uid == op.uid}
        out.append(replace(
            op, uid=new_uid.get(op.uid, op.uid),
            states=tuple(d for d in op.states if d.name not in dropped),
            subtasks=tuple(replace(s, files=tuple(f for f in s.files if f.state not in dropped)) for s in op.subtasks),
        ))
    return out
