"""Publishing outputs: never over what appeared at ``-o`` meanwhile, never inside an input.

Every writer of a directory (rescale, modify, migrate, bootstrap, diff ``-o``, the Flink
rewrites, Spark's local exports) publishes through :mod:`statekit.writers.staging`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.diff import DiffSpec
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers import staging
from statekit.writers.bootstrap import bootstrap_savepoint
from statekit.writers.bootstrap_spec import BootstrapSpec
from statekit.writers.diff_output import write_diff
from statekit.writers.migration import migrate_savepoint
from statekit.writers.rescale import rescale_savepoint
from statekit.writers.savepoint_modification import modify_savepoint
from statekit.writers.savepoint_writer import SavepointWriter
from statekit.writers.staging import staged_output_dir

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")


@pytest.fixture
def source(tmp_path: Path) -> str:
    path = str(tmp_path / "sp")
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("counter", {COUNT: [(f"w{i}", i) for i in range(300)]}, parallelism=2)
    writer.write(path)
    return path


@pytest.fixture(params=["renameat2", "lock and re-check"])
def publishing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of publishing: the atomic no-replace rename, and the fallback without it."""
    if request.param != "renameat2":
        monkeypatch.setattr(staging, "_RENAMEAT2", [None])
    else:
        assert staging._renameat2() is not None, "this Linux C library has no renameat2"
    return str(request.param)


def progress_hook(action: Callable[[], None]) -> Callable[..., Any]:
    """A progress factory that runs ``action`` once, at the command's first progress (its output
    checked and staged, nothing published yet)."""
    done: list[bool] = []

    def advance(*_: Any, **__: Any) -> None:
        if not done:
            done.append(True)
            action()

    @contextmanager
    def factory(*_: Any, **__: Any) -> Iterator[Callable[..., None]]:
        yield advance

    return factory


def listing(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def no_staging_left(parent: Path) -> bool:
    return not [p for p in os.listdir(parent) if ".inprogress-" in p]


# ---------------------------------------------------------------- item 4: publishing


def test_a_folder_that_appears_at_the_output_during_the_run_is_kept(source: str, tmp_path: Path,
                                                                    publishing: str) -> None:
    out = tmp_path / "out"

    def user_creates_folder() -> None:
        out.mkdir()
        (out / "notes.txt").write_text("mine", encoding="utf-8")

    with pytest.raises(BadInputError, match="appeared at the output while this command ran"):
        rescale_savepoint(source, str(out), parallelism=3, progress=progress_hook(user_creates_folder))
    assert listing(out) == {"notes.txt": b"mine"}
    assert no_staging_left(tmp_path)


def test_of_two_rescales_to_one_output_the_second_to_finish_fails(source: str, tmp_path: Path,
                                                                   publishing: str) -> None:
    out = tmp_path / "out"

    def other_rescale() -> None:
        rescale_savepoint(source, str(out), parallelism=4)

    with pytest.raises(BadInputError, match="appeared at the output"):
        rescale_savepoint(source, str(out), parallelism=3, progress=progress_hook(other_rescale))
    reader = SavepointReader.read(str(out))
    assert reader.operator("counter").parallelism == 4  # the first one published, untouched
    assert verify_snapshot(str(out)).ok
    assert no_staging_left(tmp_path)


def test_two_cli_rescales_to_one_output_never_both_exit_0(source: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    inner: list[subprocess.CompletedProcess[str]] = []

    def other_rescale() -> None:  # a second `statekit rescale` to the same -o, run to its end
        inner.append(subprocess.run([sys.executable, "-m", "statekit.cli.main", "rescale", source, "-p", "4",
                                     "-o", str(out)], capture_output=True, text=True, timeout=120))

    original = rescale_savepoint

    def rescale_with_hook(*args: Any, **kwargs: Any) -> Any:
        kwargs["progress"] = progress_hook(other_rescale)
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("statekit.writers.rescale.rescale_savepoint", rescale_with_hook)
        outer = CliRunner().invoke(cli, ["rescale", source, "-p", "3", "-o", str(out)])
    assert inner and inner[0].returncode == 0, inner[0].stderr if inner else "the second rescale never ran"
    assert outer.exit_code == 2, outer.output
    assert "appeared at the output" in outer.output and "Traceback" not in outer.output
    assert SavepointReader.read(str(out)).operator("counter").parallelism == 4
    assert verify_snapshot(str(out)).ok


def test_an_empty_output_directory_given_beforehand_is_still_accepted(source: str, tmp_path: Path,
                                                                      publishing: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    rescale_savepoint(source, str(out), parallelism=3)
    assert SavepointReader.read(str(out)).operator("counter").parallelism == 3


def test_an_empty_output_directory_swapped_for_another_during_the_run_is_kept(source: str, tmp_path: Path,
                                                                              publishing: str) -> None:
    out = tmp_path / "out"
    out.mkdir()

    def swap() -> None:
        out.rmdir()
        out.mkdir()  # another, empty, directory: someone else's now

    with pytest.raises(BadInputError, match="appeared at the output"):
        rescale_savepoint(source, str(out), parallelism=3, progress=progress_hook(swap))
    assert out.is_dir() and not list(out.iterdir())


def test_a_file_that_appears_at_the_output_is_kept(tmp_path: Path, publishing: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(BadInputError, match="appeared at the output"), \
            staged_output_dir(str(out)) as (io, directory):
        io.write_atomic(os.path.join(directory, "x"), b"1")
        out.write_bytes(b"theirs")
    assert out.read_bytes() == b"theirs"
    assert no_staging_left(tmp_path)


# ---------------------------------------------------------------- item 10: outputs inside an input


def test_every_writer_refuses_an_output_inside_its_input(source: str, tmp_path: Path) -> None:
    inner = os.path.join(source, "inner")
    before = listing(Path(source))
    writers: dict[str, Callable[[], Any]] = {
        "rescale": lambda: rescale_savepoint(source, inner, parallelism=3),
        "rescale --dry-run": lambda: rescale_savepoint(source, inner, parallelism=3, dry_run=True),
        "modify": lambda: modify_savepoint(source, inner, rename_uids=[("counter", "c2")]),
        "migrate": lambda: migrate_savepoint(source, inner, "counter", "count", "long"),
        "writer": lambda: SavepointWriter.from_existing_savepoint(source).remove_state("counter", "count")
        .write(inner),
        "diff -o": lambda: write_diff(DiffSpec(source, source, output=inner)),
        "rescale -o SP itself/_metadata's dir": lambda: rescale_savepoint(os.path.join(source, "_metadata"),
                                                                         os.path.join(source, "x", "y"),
                                                                         parallelism=3),
    }
    for name, write in writers.items():
        with pytest.raises(BadInputError, match="lies inside the input") as caught:
            write()
        assert inner in str(caught.value) or source in str(caught.value), name
    assert listing(Path(source)) == before


def test_bootstrap_refuses_an_output_inside_its_input_files_or_from_savepoint(source: str, tmp_path: Path) -> None:
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "a.csv").write_text("user,count\nx,1\n", encoding="utf-8")
    base = {"uid": "added", "state": "count", "key_column": "user", "value_columns": ["count"],
            "value_type": "int"}
    for spec in (BootstrapSpec(inputs=[str(rows)], output=str(rows / "out"), **base),
                 BootstrapSpec(inputs=[str(rows)], output=os.path.join(source, "out"), from_savepoint=source, **base)):
        with pytest.raises(BadInputError, match="lies inside the input"):
            bootstrap_savepoint(spec)
    assert sorted(os.listdir(rows)) == ["a.csv"]


def test_an_output_reached_through_a_link_into_the_input_is_refused(source: str, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(source)
    with pytest.raises(BadInputError, match="lies inside the input"):
        rescale_savepoint(source, str(link / "inner"), parallelism=3)


def test_the_cli_says_it_in_one_line_with_exit_2(source: str) -> None:
    for args in (["rescale", source, "-p", "3", "-o", f"{source}/inner"],
                 ["modify", source, "--rename-uid", "counter=c", "-o", f"{source}/inner"],
                 ["diff", source, source, "-o", f"{source}/inner"]):
        done = CliRunner().invoke(cli, args)
        assert done.exit_code == 2, (args, done.output)
        assert "lies inside the input" in done.output and "Traceback" not in done.output


def test_spark_local_outputs_refuse_an_output_inside_the_input(source: str) -> None:
    from statekit.spark.session import _LocalOutputDir

    target = _LocalOutputDir(os.path.join(source, "export"), None, [source])
    with pytest.raises(BadInputError, match="lies inside the input"), target.staged():
        pass
