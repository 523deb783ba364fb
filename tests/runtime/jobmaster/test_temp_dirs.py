"""A job's temporary directories: locked while their process lives, removed at the job's end,
and swept by the next job when the process was SIGKILLed (runtime/jobmaster/temp_dirs.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from statekit.runtime.jobmaster import temp_dirs
from statekit.runtime.jobmaster.temp_dirs import LOCK_NAME, PREFIX, TempDirs, sweep


@pytest.fixture
def temp(private_temp: Path) -> Path:
    """The process's temporary directory for this test (never the machine's /tmp)."""
    return private_temp


def children(base: Path) -> list[str]:
    return sorted(p.name for p in base.iterdir())


def test_a_held_directory_survives_a_sweep_and_goes_with_its_job(temp: Path) -> None:
    dirs = TempDirs()
    path = dirs.create(PREFIX + "rocksdb-")
    assert Path(path).parent == temp and sorted(os.listdir(path)) == [LOCK_NAME]
    assert sweep() == []  # the lock is held (by another open file of this very process)
    assert os.path.isdir(path)
    dirs.remove_all()
    assert children(temp) == []
    dirs.remove_all()  # twice: nothing left to do


def test_a_prefix_outside_the_sweep_is_refused(temp: Path) -> None:
    with pytest.raises(ValueError, match="starts with 'statekit-'"):
        TempDirs().create("other-")
    assert children(temp) == []


CHILD = textwrap.dedent("""
    import sys, tempfile, time
    tempfile.tempdir = sys.argv[1]
    from statekit.runtime.jobmaster.temp_dirs import TempDirs
    dirs = TempDirs()
    for prefix in ("statekit-checkpoints-", "statekit-rocksdb-"):
        open(dirs.create(prefix) + "/data", "w").write("x")
    print("ready", flush=True)
    time.sleep(600)
""")


def killed_child_dirs(temp: Path) -> list[str]:
    """Two locked directories of a process that is then SIGKILLed."""
    before = children(temp)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(temp)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        made = sorted(set(children(temp)) - set(before))
        assert len(made) == 2
        assert sweep() == []  # alive: both held
        assert children(temp) == sorted(before + made)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    return made


def test_the_directories_of_a_killed_process_are_swept(temp: Path) -> None:
    made = killed_child_dirs(temp)
    assert sorted(os.path.basename(p) for p in sweep()) == made
    assert children(temp) == []


def test_what_is_not_a_dead_jobs_directory_stays(temp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (temp / (PREFIX + "no-lock")).mkdir()  # being made, or made by an older statekit
    (temp / (PREFIX + "a-file")).write_text("x")
    (temp / "other-dir").mkdir()
    stale = temp.parent / "elsewhere"
    stale.mkdir()
    (stale / LOCK_NAME).write_text("")  # a lock nobody holds, outside the temp dir
    (temp / (PREFIX + "link")).symlink_to(stale, target_is_directory=True)
    kept = children(temp)
    assert sweep() == []
    assert children(temp) == kept and (stale / LOCK_NAME).exists()
    # a directory of another user, whose lock nobody holds
    made = killed_child_dirs(temp)
    me = os.getuid()
    monkeypatch.setattr(temp_dirs.os, "getuid", lambda: me + 1)
    assert sweep() == []
    assert set(made) <= set(children(temp))


def test_the_next_job_sweeps_what_a_killed_job_left(temp: Path) -> None:
    """A real job on RocksDB with checkpoints in the temp dir, SIGKILLed mid-run; the next job in
    the same temp dir removes its directories, and leaves none of its own."""
    job = textwrap.dedent("""
        import sys, tempfile
        tempfile.tempdir = sys.argv[1]
        from statekit.runtime.dataflow.environment import StreamEnvironment
        from statekit.runtime.connectors.sinks import DiscardingSink
        from statekit.runtime.connectors.sources import NumberSequenceSource

        env = StreamEnvironment().set_parallelism(1).set_state_backend(sys.argv[2])
        env.enable_checkpointing(100)
        (env.from_source(NumberSequenceSource(0, int(sys.argv[3])), "numbers").uid("numbers")
            .key_by(lambda v: v % 7).reduce(lambda a, b: a + b).uid("sums")
            .sink_to(DiscardingSink()).uid("sink"))
        env.execute("temp dirs")
    """)
    child = subprocess.Popen([sys.executable, "-c", job, str(temp), "rocksdb", "1000000000000"])
    try:
        deadline = time.monotonic() + 60
        while len([n for n in children(temp) if n.startswith(PREFIX)]) < 2:
            assert time.monotonic() < deadline and child.poll() is None, children(temp)
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    left = children(temp)
    assert {n.split("-")[1] for n in left} == {"checkpoints", "rocksdb"}
    done = subprocess.run([sys.executable, "-c", job, str(temp), "hashmap", "50"], timeout=120)
    assert done.returncode == 0
    assert children(temp) == []


def test_a_jobs_first_directory_is_made_after_a_sweep(temp: Path) -> None:
    made = killed_child_dirs(temp)
    dirs = TempDirs()
    first = dirs.create(PREFIX + "checkpoints-")
    assert children(temp) == [os.path.basename(first)]  # the killed process's two are gone
    later = killed_child_dirs(temp)
    second = dirs.create(PREFIX + "rocksdb-")  # one sweep per job: these stay until the next job
    assert set(children(temp)) == {os.path.basename(first), os.path.basename(second), *later}
    assert not set(made) & set(children(temp))
    dirs.remove_all()
    assert sorted(os.path.basename(p) for p in sweep()) == sorted(later)
