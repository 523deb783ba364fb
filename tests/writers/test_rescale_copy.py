"""Rescale under the same max parallelism copies runs of blocks (kernel copy, sendfile, or
buffered) and combines the whole-file CRC-32 from the blocks': each new file must be
byte-for-byte the file a decode-and-rewrite of its key groups gives, whichever way the
bytes were copied, and its recorded checksum zlib's CRC-32 of its bytes."""

from __future__ import annotations

import itertools
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt import layout
from statekit.statefmt.checksum import format_checksum
from statekit.statefmt.encoding import WriteFormat, writing_format
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers import state_writer
from statekit.writers.rescale import rescale_savepoint
from statekit.writers.savepoint_writer import SavepointWriter
from statekit.writers.state_writer import write_keyed_file

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
TAGS = StateDescriptor("tags", StateKind.MAP, value_type="list<string>", user_key_type="string")
RAW = StateDescriptor("raw", StateKind.VALUE)


def build(path: Path, keys: list[int], max_parallelism: int, parallelism: int, compression: str) -> str:
    writer = SavepointWriter.new_savepoint(max_parallelism)
    writer.with_operator("op", {
        COUNT: [(f"k{k}", k) for k in keys],
        TAGS: [(f"k{k}", f"u{k % 3}", [f"t{k}"] * (k % 4)) for k in keys],
        RAW: [(f"k{k}", {"n": k, "blob": "x" * (k % 50)}) for k in keys],
    }, parallelism=parallelism)
    with writing_format(WriteFormat(compression=compression)):
        writer.write(str(path))
    return str(path)


def rewritten(source: str, out: str, tmp: Path, compression: str) -> None:
    """Every file of ``out`` equals a file written from its key groups' decoded source blocks,
    and its recorded checksum and size are those of its bytes."""
    src, new = SavepointReader.read(source), SavepointReader.read(out)
    io, root = FileIO.for_path(str(tmp))
    for subtask in new.operator("op").subtasks:
        for file in subtask.files:
            blocks = {kg: batch for _, kg, batch in src.read_keyed_batches("op", file.state)
                      if kg in subtask.key_group_range}
            data = Path(out, file.path).read_bytes()
            assert (file.checksum, file.size) == (format_checksum(zlib.crc32(data)), len(data))
            if not blocks:  # no blocks: the source's header (a new writer's would have no value type)
                assert file.entries == 0
                continue
            with writing_format(WriteFormat(compression=compression)):
                expected = write_keyed_file(io, root, file.path, file.state, sorted(blocks.items()))
            assert data == Path(tmp, file.path).read_bytes(), file.path
            assert (file.checksum, file.size) == (format_checksum(zlib.crc32(data)), len(data)) == \
                (expected.checksum, expected.size)


def no_kernel_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_writer, "_kernel_copy", lambda *args: False)


def sendfile_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "copy_file_range", raising=False)


def copy_file_range_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def refuse(*args: Any) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)


WAYS = {"kernel": lambda m: None, "buffered": no_kernel_copy, "sendfile": sendfile_only,
        "copy_file_range refused": copy_file_range_refused}


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_copied_files_equal_a_decode_and_rewrite(tmp_path: Path, way: str, compression: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    keys = list(range(0, 3000, 7))
    source = build(tmp_path / "src", keys, 128, 3, compression)
    WAYS[way](monkeypatch)
    rescale_savepoint(source, str(tmp_path / "out"), parallelism=5)
    rewritten(source, str(tmp_path / "out"), tmp_path / "rewrite", compression)


@pytest.mark.parametrize("rehash_below", [0, 1 << 40])
def test_large_blocks_checksum_by_combination_or_by_rehashing(tmp_path: Path, rehash_below: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    source = build(tmp_path / "src", list(range(6000)), 4, 1, "none")
    assert max(e.length for f in SavepointReader.read(source).operator("op").subtasks[0].files
               for e in _index(source, f.path)) > 32 << 10
    monkeypatch.setattr(state_writer, "_REHASH_BELOW", rehash_below)
    rescale_savepoint(source, str(tmp_path / "out"), parallelism=3)
    rewritten(source, str(tmp_path / "out"), tmp_path / "rewrite", "none")


def _index(snapshot: str, relative: str) -> tuple[Any, ...]:
    from statekit.statefmt.statefile import StateFileReader

    path = Path(snapshot, relative)
    with path.open("rb") as stream:
        return StateFileReader(stream, path.stat().st_size, path=str(path)).index


def test_the_kernel_copy_is_used_between_local_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = build(tmp_path / "src", list(range(500)), 64, 2, "none")
    copied: list[int] = []
    original = state_writer._kernel_copy

    def counting(*args: Any) -> bool:
        done = original(*args)
        copied.append(int(done))
        return done

    monkeypatch.setattr(state_writer, "_kernel_copy", counting)
    rescale_savepoint(source, str(tmp_path / "out"), parallelism=3)
    assert copied and all(copied)


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this OS")
def test_each_kernel_copy_starts_the_writeback_of_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The output's dirty pages go to disk while later runs copy (fadvise of each copied range,
    so earlier runs stay cached); the files stay byte-equal to a decode-and-rewrite, and a
    refused hint is no error."""
    source = build(tmp_path / "src", list(range(500)), 64, 2, "none")
    advised: dict[int, list[tuple[int, int]]] = {}

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED and length > 0
        advised.setdefault(os.fstat(fd).st_ino, []).append((offset, length))  # per file (fds are reused)
        raise OSError(22, "refused")  # a filesystem that does not take the hint

    monkeypatch.setattr(state_writer.os, "posix_fadvise", advise)
    rescale_savepoint(source, str(tmp_path / "out"), parallelism=3)
    assert len(advised) >= 3  # every new subtask file of each state: at least one run
    for ranges in advised.values():  # one file's runs: consecutive ranges after its header
        assert ranges[0][0] > 0
        assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(ranges))
    monkeypatch.undo()
    rescale_savepoint(source, str(tmp_path / "plain"), parallelism=3)
    out, plain = tmp_path / "out", tmp_path / "plain"
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file() and p.name != "_metadata")
    assert files and all((out / f).read_bytes() == (plain / f).read_bytes() for f in files)


def test_a_damaged_block_found_after_a_kernel_copy_fails_the_rescale(tmp_path: Path) -> None:
    from statekit.statefmt.errors import CorruptStateError

    source = build(tmp_path / "src", list(range(500)), 64, 2, "none")
    reader = SavepointReader.read(source)
    file = reader.operator("op").subtasks[1].files[0]
    path = Path(source, file.path)
    data = bytearray(path.read_bytes())
    data[layout.STATE_FILE_HEADER.size + 200] ^= 0xFF  # inside the first blocks, not the header
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError):
        rescale_savepoint(source, str(tmp_path / "out"), parallelism=3)
    assert not (tmp_path / "out").exists()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.integers(0, 10**6), min_size=1, max_size=200, unique=True),
       shape=st.data(), compression=st.sampled_from(["none", "lz4"]))
def test_any_new_parallelism_equals_a_decode_and_rewrite(keys: list[int], shape: st.DataObject,
                                                         compression: str) -> None:
    max_p = shape.draw(st.integers(1, 200), "max parallelism")
    p1 = shape.draw(st.integers(1, min(max_p, 6)), "p1")
    p2 = shape.draw(st.integers(1, min(max_p, 6)).filter(lambda p: p != p1), "p2")
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        source = build(root / "src", keys, max_p, p1, compression)
        rescale_savepoint(source, str(root / "out"), parallelism=p2)
        rewritten(source, str(root / "out"), root / "rewrite", compression)
