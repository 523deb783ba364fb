"""Sources: the Source/SourceReader API, a replayable file source, a number sequence.

A source task calls :meth:`SourceReader.poll` between mails; records of one poll are
emitted before the next mail (barrier) is handled, so the reader's state (offsets) at a
barrier covers exactly the records emitted before it. Offsets are operator state.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import IO, Any

import mmh3

from statekit.runtime.api.functions import FunctionInitializationContext, FunctionSnapshotContext
from statekit.runtime.api.sources import Source, SourceReader, SourceReaderContext
from statekit.runtime.api.state import ListStateDescriptor
from statekit.statefmt.errors import BadInputError, PathNotFoundError

__all__ = [
    "FileSource",
    "NumberSequenceSource",
    "CollectionSource",
    "index_split",
    "file_owner",
    "OFFSETS",
    "SPLITS",
]


# ---------------------------------------------------------------- file source


class FileSource(Source):
    """Lines of the UTF-8 text files of a directory, replayable from byte offsets.

    Files are the directory's regular files (not hidden, not starting with ``_``), each read
    whole by one subtask, in sorted name order. Which one: the job master lists the directory
    once per execution attempt (:meth:`plan`) and deals the files out by size, the largest
    first, each to the subtask with the fewest bytes so far (names break ties), so that the
    subtasks read about the same bytes whatever the files are named; a file that appears after
    that listing (watch mode) goes to subtask ``murmur3(name) % p``. Every reader of an attempt
    holds the same plan, so every file has exactly one owner. Offsets (bytes consumed per
    file) are union list state ``offsets``: a restore, at any parallelism, hands each file's
    offset to the file's owner in the new attempt.

    Args:
        directory: The input directory.
        watch: Continuous mode: keep watching for new files and appended lines.
        monitor_interval_s: How often the directory is listed again in watch mode.
        encoding: The files' text encoding.
    """

    def __init__(self, directory: str, *, watch: bool = False, monitor_interval_s: float = 0.2,
                 encoding: str = "utf-8") -> None:
        self.directory = directory
        self.watch = watch
        self.monitor_interval_s = monitor_interval_s
        self.encoding = encoding

    @property
    def bounded(self) -> bool:
        return not self.watch

    def plan(self, parallelism: int) -> dict[str, int] | None:
        """The owner of each file in the directory now: sizes dealt out largest first, each
        to the subtask with the fewest bytes so far (None: the directory cannot be listed;
        the readers then report it)."""
        try:
            files = sorted((-entry.stat().st_size, entry.name) for entry in os.scandir(self.directory)
                           if entry.is_file() and not entry.name.startswith((".", "_")))
        except OSError:
            return None
        loads = [0] * parallelism
        owners: dict[str, int] = {}
        for negative_size, name in files:
            owner = min(range(parallelism), key=loads.__getitem__)
            owners[name] = owner
            loads[owner] -= negative_size
        return owners

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        return _FileSourceReader(self, ctx)


def file_owner(name: str, parallelism: int, plan: dict[str, int] | None) -> int:
    """The subtask that reads ``name``: the plan's, else by the name's murmur3 hash."""
    if plan is not None:
        owner = plan.get(name)
        if owner is not None:
            return owner
    return mmh3.hash(name.encode("utf-8"), 0, False) % parallelism


OFFSETS = ListStateDescriptor("offsets", value_type="struct<file:string,offset:int>")
_CHUNK = 1 << 16


class _FileSourceReader(SourceReader):
    def __init__(self, source: FileSource, ctx: SourceReaderContext) -> None:
        self.source = source
        self.ctx = ctx
        self.offsets: dict[str, int] = {}
        self.queue: list[str] = []
        self.current: str | None = None
        self.stream: IO[bytes] | None = None
        self.listed = False
        self.idle_wait_s = source.monitor_interval_s

    def owns(self, name: str) -> bool:
        return file_owner(name, self.ctx.parallelism, self.ctx.plan) == self.ctx.subtask

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        self.state = ctx.operator_state_store.get_union_list_state(OFFSETS)
        for element in self.state.get():
            if self.owns(element["file"]):
                self.offsets[element["file"]] = int(element["offset"])
        if not os.path.isdir(self.source.directory):
            raise PathNotFoundError("input directory does not exist; pass an existing --input", path=self.source.directory)

    def _list(self) -> None:
        names = sorted(
            entry.name for entry in os.scandir(self.source.directory)
            if entry.is_file() and not entry.name.startswith((".", "_")) and self.owns(entry.name)
        )
        for name in names:
            self.offsets.setdefault(name, 0)
        self.queue = [n for n in names if n != self.current and self._remaining(n)]
        self.listed = True

    def _remaining(self, name: str) -> bool:
        try:
            return os.path.getsize(os.path.join(self.source.directory, name)) > self.offsets.get(name, 0)
        except OSError:
            return False

    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        if not self.listed:
            self._list()
        while True:
            if self.stream is None:
                if not self.queue:
                    if self.source.watch:
                        self.listed = False
                        return [], False
                    return [], True
                self.current = self.queue.pop(0)
                self.stream = open(os.path.join(self.source.directory, self.current), "rb")  # noqa: SIM115
                self.stream.seek(self.offsets[self.current])
            records = self._read_lines(max_records)
            if records:
                return records, False

    def _read_lines(self, max_records: int) -> list[str]:
        assert self.stream is not None and self.current is not None
        data = self.stream.read(_CHUNK)
        while data and b"\n" not in data:
            more = self.stream.read(_CHUNK)
            if not more:
                break
            data += more
        if not data:
            self._close_current()
            return []
        end = data.rfind(b"\n") + 1
        at_eof = False
        if end == 0:
            if self.source.watch:  # wait for the line to be completed
                self.stream.seek(self.offsets[self.current])
                self._close_current()
                return []
            end, at_eof = len(data), True
        lines = data[:end].split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        self.offsets[self.current] += end
        self.stream.seek(self.offsets[self.current])
        if at_eof:
            self._close_current()
        encoding = self.source.encoding
        return [line.rstrip(b"\r").decode(encoding, errors="replace") for line in lines]

    def _close_current(self) -> None:
        if self.stream is not None:
            self.stream.close()
        self.stream = None
        self.current = None

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        self.state.update([{"file": name, "offset": offset} for name, offset in sorted(self.offsets.items())])

    def close(self) -> None:
        self._close_current()


# ---------------------------------------------------------------- sequences


SPLITS = ListStateDescriptor("splits", value_type="struct<next:int,end:int>")


def index_split(first: int, last: int, parallelism: int, subtask: int) -> tuple[int, int]:
    """The indexes ``[start, end]`` (inclusive; none when ``end < start``) that ``subtask`` of
    ``parallelism`` reads of ``first..last``: even splits in order, the first ones one longer."""
    base, extra = divmod(max(0, last - first + 1), parallelism)
    start = first + subtask * base + min(subtask, extra)
    return start, start + base + (1 if subtask < extra else 0) - 1


class _SplitReader(SourceReader):
    """Reads ``[next, end]`` index splits; the splits are even-split list state."""

    def __init__(self, ctx: SourceReaderContext, first: int, last: int) -> None:
        self.ctx = ctx
        self.first = first
        self.last = last
        self.splits: list[list[int]] = []

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        self.state = ctx.operator_state_store.get_list_state(SPLITS)
        if ctx.is_restored():
            self.splits = [[int(s["next"]), int(s["end"])] for s in self.state.get()]
            return
        start, end = index_split(self.first, self.last, self.ctx.parallelism, self.ctx.subtask)
        self.splits = [[start, end]] if start <= end else []

    def elements(self, first: int, last: int) -> list[Any]:
        """The records of indexes ``first..last`` (inclusive)."""
        return list(range(first, last + 1))

    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        while self.splits and self.splits[0][0] > self.splits[0][1]:
            self.splits.pop(0)
        if not self.splits:
            return [], True
        split = self.splits[0]
        stop = min(split[1], split[0] + max_records - 1)
        records = self.elements(split[0], stop)
        split[0] = stop + 1
        return records, False

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        self.state.update([{"next": s[0], "end": s[1]} for s in self.splits if s[0] <= s[1]])


class NumberSequenceSource(Source):
    """The integers ``start..end`` (inclusive), split evenly over the subtasks."""

    def __init__(self, start: int, end: int) -> None:
        if end < start:
            raise BadInputError(f"number sequence end {end} is before its start {start}")
        self.start = start
        self.end = end

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        return _SplitReader(ctx, self.start, self.end)


class _CollectionReader(_SplitReader):
    def __init__(self, ctx: SourceReaderContext, elements: Sequence[Any]) -> None:
        super().__init__(ctx, 0, len(elements) - 1)
        self.collection = elements

    def elements(self, first: int, last: int) -> list[Any]:
        return list(self.collection[first:last + 1])


class CollectionSource(Source):
    """The elements of an in-memory sequence, split evenly (replayable by index)."""

    def __init__(self, elements: Sequence[Any]) -> None:
        self.elements = list(elements)

    def __deepcopy__(self, memo: dict[int, Any]) -> CollectionSource:
        return self  # read-only: every subtask reads its own index splits of the same list

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        return _CollectionReader(ctx, self.elements)
