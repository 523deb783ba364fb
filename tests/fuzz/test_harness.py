"""The fuzz harness catches what it claims to catch (and passes what is allowed).

Each test runs a few lines of Python in the same audited, limited child the statekit runs
use (``audit_child.py --python``) and checks the verdict of :func:`fuzz_harness.check_run`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuzz_harness import (
    ADDRESS_SPACE,
    Command,
    Guarded,
    RunDirs,
    check_run,
    run_child,
    system_roots,
)

READ_ONLY = Command("read-only", lambda d: [])
WRITER = Command("writer", lambda d: [], writes=("outdir", "tmp"), produces_output=True)
DISPOSER = Command("disposer", lambda d: [], deletes=("snap",), disposes=True)


@pytest.fixture
def dirs(tmp_path: Path) -> RunDirs:
    d = RunDirs(tmp_path, "savepoint-x")
    (d.snap / "op").mkdir(parents=True)
    (d.snap / "_metadata").write_bytes(b"meta")
    (d.snap / "op" / "state.sks").write_bytes(b"state")
    d.canary.mkdir()
    (d.canary / "secret.txt").write_text("canary")
    d.shared.mkdir()
    d.outside.mkdir()
    (d.outside / "secret.txt").write_text("outside")
    d.other.mkdir(parents=True)
    return d


def verdict(dirs: RunDirs, command: Command, code: str, timeout_s: float = 20) -> list[str]:
    guarded = Guarded.take(dirs)
    result = run_child(dirs, [], python_code=code, timeout_s=timeout_s)
    return check_run(dirs, command, result, guarded, system_roots())


def test_reading_inside_the_snapshot_passes(dirs: RunDirs) -> None:
    code = f"import os; open({str(dirs.snap / 'op' / 'state.sks')!r}, 'rb').read(); os.listdir({str(dirs.snap)!r})"
    assert verdict(dirs, READ_ONLY, code) == []


def test_reading_the_canary_is_caught(dirs: RunDirs) -> None:
    problems = verdict(dirs, READ_ONLY, f"open({str(dirs.canary / 'secret.txt')!r}).read()")
    assert any(p.startswith("read outside the allowed directories: ") and "canary/secret.txt" in p for p in problems)


def test_reading_through_a_symlink_leaving_the_snapshot_is_caught(dirs: RunDirs) -> None:
    os.symlink(dirs.outside / "secret.txt", dirs.snap / "op" / "link.sks")
    problems = verdict(dirs, READ_ONLY, f"open({str(dirs.snap / 'op' / 'link.sks')!r}).read()")
    assert any("outside/secret.txt (via " in p and "link.sks" in p for p in problems), problems


def test_deleting_outside_is_caught_twice(dirs: RunDirs) -> None:
    problems = verdict(dirs, DISPOSER, f"import os; os.remove({str(dirs.outside / 'secret.txt')!r})")
    assert any(p.startswith("delete outside the allowed directories: ") for p in problems), problems
    assert any(p.startswith("outside/ changed: ") and "secret.txt removed" in p for p in problems), problems


def test_disposing_through_rmtree_inside_the_snapshot_passes(dirs: RunDirs) -> None:
    assert verdict(dirs, DISPOSER, f"import shutil; shutil.rmtree({str(dirs.snap)!r})") == []


def test_a_partial_dispose_is_caught(dirs: RunDirs) -> None:
    problems = verdict(dirs, DISPOSER, f"import os; os.remove({str(dirs.snap / '_metadata')!r})")
    assert "dispose exited 0 but left 3 entries of the snapshot" in problems  # ., op, op/state.sks


def test_writing_into_the_snapshot_is_caught(dirs: RunDirs) -> None:
    problems = verdict(dirs, READ_ONLY, f"open({str(dirs.snap / 'op' / 'new.tmp')!r}, 'wb').close()")
    assert any(p.startswith("write outside the allowed directories: ") for p in problems), problems
    assert any(p.startswith("parent/ changed: ") for p in problems), problems


def test_an_output_appearing_whole_passes(dirs: RunDirs) -> None:
    whole = (f"import os; os.makedirs({str(dirs.outdir / '.stage')!r}); "
             f"open({str(dirs.outdir / '.stage' / '_metadata')!r}, 'wb').close(); "
             f"os.rename({str(dirs.outdir / '.stage')!r}, {str(dirs.out)!r})")
    assert verdict(dirs, WRITER, whole) == []


def test_a_failed_output_left_behind_is_caught(dirs: RunDirs) -> None:
    leftover = (f"import os, sys; os.makedirs({str(dirs.outdir / '.stage')!r}); "
                "print('statekit: error: /x: bad', file=sys.stderr); sys.exit(2)")
    assert verdict(dirs, WRITER, leftover) == ["exit 2 but the output directory holds ['.stage']"]


def test_a_temp_file_left_behind_is_caught(dirs: RunDirs) -> None:
    problems = verdict(dirs, WRITER, f"open({str(dirs.tmp / 'spill')!r}, 'wb').close()")
    assert "TMPDIR not empty afterwards: ['spill']" in problems


def test_a_traceback_and_exit_code_3_are_caught(dirs: RunDirs) -> None:
    problems = verdict(dirs, READ_ONLY, "import sys; print('Traceback (most recent call last):', file=sys.stderr); sys.exit(3)")
    assert "exit code 3 (expected 0, 1 or 2)" in problems
    assert "a traceback was printed" in problems


def test_exit_2_needs_exactly_one_error_line(dirs: RunDirs) -> None:
    ok = "import sys; print('statekit: error: /x: bad', file=sys.stderr); sys.exit(2)"
    assert verdict(dirs, READ_ONLY, ok) == []
    two = "import sys; print('statekit: error: /x: bad\\nmore', file=sys.stderr); sys.exit(2)"
    assert any(p.startswith("exit 2 but stderr is not exactly one") for p in verdict(dirs, READ_ONLY, two))


def test_invalid_json_output_is_caught(dirs: RunDirs) -> None:
    command = Command("json", lambda d: [], json=True)
    assert any(p.startswith("--json output is not JSON") for p in verdict(dirs, command, "print('{')"))


def test_a_hang_is_killed_and_caught(dirs: RunDirs) -> None:
    problems = verdict(dirs, READ_ONLY, "import time; time.sleep(60)", timeout_s=1.5)
    assert problems and problems[0].startswith("hang: ")


def test_the_address_space_is_limited(dirs: RunDirs) -> None:
    code = (f"import sys\ntry:\n    bytearray({ADDRESS_SPACE})\nexcept MemoryError:\n    sys.exit(2)\n"
            "print('allocated')")
    result = run_child(dirs, [], python_code=code)
    assert result.returncode == 2, result.stdout


def test_unpickling_is_caught(dirs: RunDirs) -> None:
    problems = verdict(dirs, READ_ONLY, "import pickle, datetime; pickle.loads(pickle.dumps(datetime.date(2020, 1, 1)))")
    assert any(p.startswith("unpickle: pickle.find_class") for p in problems), problems
