"""``statekit dispose`` on real incremental RocksDB checkpoints of the mini runtime: never through a
symbolic link (a ``shared/`` linked to a user's folder), never under a running job (unless
``--force``, which keeps the shared files), never a shared file a newer checkpoint may use."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from jobs_for_checkpoints import (
    SlowSink,
    expected_sums,
    keyed_sums,
    retained_checkpoints,
    shared_listing,
    start_with,
    summing_job,
    wait_until,
)

from statekit.cli.main import cli
from statekit.readers.shared_refs import shared_files_of
from statekit.readers.verification import verify_snapshot
from statekit.runtime.api.checkpoint_config import ExternalizedCheckpointCleanup
from statekit.runtime.control.registry import JobRegistry, current_process_entry
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.layout import JOB_LOCK_FILE

N = 50_000_000  # never ends on its own: the tests cancel it


@pytest.fixture(autouse=True)
def registry_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("STATEKIT_HOME", str(home))
    return home


def incremental(storage: str, *, retained: int = 3) -> JobHandle:
    env = summing_job(N, 2, SlowSink(0.0), storage=storage)
    env.set_state_backend("rocksdb", incremental=True)
    env.enable_checkpointing(20, num_retained=retained,
                             externalized_cleanup=ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return start_with(env, RunOptions(), "incremental")


def completed_count(handle: JobHandle) -> int:
    return int(handle.checkpoint_stats()["counts"]["completed"])


def wait_for_checkpoints(handle: JobHandle, count: int) -> None:
    wait_until(lambda: completed_count(handle) >= count or handle.status.is_terminal, f"{count} checkpoints", 120)
    assert handle.status is JobStatus.RUNNING, handle.describe()


def stop(handle: JobHandle) -> None:
    handle.cancel()
    handle.wait(60)
    assert handle.status is JobStatus.CANCELED, handle.describe()


def dispose(*args: str) -> Any:
    return CliRunner().invoke(cli, ["dispose", *args])


def entries_under(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    """The directory of a cancelled incremental job with three retained checkpoints."""
    handle = incremental(str(tmp_path / "chk"))
    try:
        wait_for_checkpoints(handle, 6)
    finally:
        stop(handle)
    return tmp_path / "chk" / handle.job_id


def exclusive_shared(job: Path) -> tuple[int, set[str]]:
    """A retained checkpoint and the shared files only it names (what disposing it deletes)."""
    io, path = FileIO.for_path(str(job))
    retained = retained_checkpoints(io, path)
    for checkpoint_id, metadata in sorted(retained.items()):
        others = set().union(*(shared_files_of(m) for i, m in retained.items() if i != checkpoint_id))
        only = shared_files_of(metadata) - others
        if only:
            return checkpoint_id, only
    raise AssertionError(f"no retained checkpoint names a shared file of its own: {sorted(retained)}")


# ---------------------------------------------------------------- item 3: links


def test_a_shared_folder_linked_to_a_users_folder_is_never_disposed_through(job_dir: Path, tmp_path: Path) -> None:
    checkpoint_id, only = exclusive_shared(job_dir)
    user = tmp_path / "user-documents"
    shutil.move(str(job_dir / "shared"), user)  # the user's folder holds files named as the checkpoint names them
    (user / "taxes-2024.pdf").write_bytes(b"%PDF precious")
    (job_dir / "shared").symlink_to(user)
    before_user, before_job = entries_under(user), entries_under(job_dir / f"chk-{checkpoint_id}")
    for args in (["--dry-run"], [], ["--force"]):
        done = dispose(*args, str(job_dir / f"chk-{checkpoint_id}"))
        assert done.exit_code == 2, (args, done.output)
        assert "symbolic link" in done.output and "nothing was deleted" in done.output, done.output
    assert entries_under(user) == before_user and len(only) >= 1
    assert entries_under(job_dir / f"chk-{checkpoint_id}") == before_job


def test_a_linked_folder_inside_shared_is_never_disposed_through(job_dir: Path, tmp_path: Path) -> None:
    checkpoint_id, only = exclusive_shared(job_dir)
    first = sorted(only)[0].split("/")[0]  # the uid folder of one of its shared files
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(job_dir / "shared" / first), elsewhere)
    (job_dir / "shared" / first).symlink_to(elsewhere)
    before = entries_under(elsewhere)
    done = dispose(str(job_dir / f"chk-{checkpoint_id}"))
    assert done.exit_code == 2 and "symbolic link" in done.output, done.output
    assert entries_under(elsewhere) == before


def test_without_links_the_checkpoints_own_shared_files_go_with_it(job_dir: Path) -> None:
    checkpoint_id, only = exclusive_shared(job_dir)
    done = dispose("--json", str(job_dir / f"chk-{checkpoint_id}"))
    assert done.exit_code == 0, done.output
    left = shared_listing(*FileIO.for_path(str(job_dir)))
    assert not only & left and not (job_dir / f"chk-{checkpoint_id}").exists()


# ---------------------------------------------------------------- item 7: running jobs


def test_the_latest_checkpoint_of_a_running_job_is_disposed_only_with_force_and_keeps_shared_files(
    tmp_path: Path
) -> None:
    storage = str(tmp_path / "chk")
    handle = incremental(storage, retained=2)
    job = tmp_path / "chk" / handle.job_id
    try:
        wait_for_checkpoints(handle, 3)
        assert (job / JOB_LOCK_FILE).exists()
        io, path = FileIO.for_path(str(job))
        latest = max(retained_checkpoints(io, path))
        chk = job / f"chk-{latest}"
        snapshot_before = entries_under(chk)
        for args in (["--dry-run"], []):
            refused = dispose(*args, str(chk))
            assert refused.exit_code == 2, refused.output
            assert "which is running" in refused.output and "--force" in refused.output, refused.output
        assert entries_under(chk) == snapshot_before or not chk.exists()  # the job itself may retire it

        forced = dispose("--force", "--json", str(chk))
        assert forced.exit_code == 0, forced.output
        assert '"shared_files": []' in forced.output and "is running" in forced.output  # none deleted
        done_before = completed_count(handle)
        wait_for_checkpoints(handle, done_before + 3)  # the next checkpoints build on what chk-N named
    finally:
        stop(handle)
    assert not (job / JOB_LOCK_FILE).exists()
    newest = max(retained_checkpoints(*FileIO.for_path(str(job))))
    assert newest > latest
    report = verify_snapshot(str(job / f"chk-{newest}"))
    assert report.ok, json_data(report)
    sums = keyed_sums(str(job / f"chk-{newest}"))  # reads every SST the checkpoint names
    assert set(sums) == set(expected_sums(10)) and all(v > 0 for v in sums.values())
    env = summing_job(N, 2, SlowSink(0.0), storage=str(tmp_path / "restored"))
    env.set_state_backend("rocksdb", incremental=True)
    env.enable_checkpointing(20)
    restored = start_with(env, RunOptions(restore_path=str(job / f"chk-{newest}")), "restored")
    try:
        wait_for_checkpoints(restored, 1)
    finally:
        stop(restored)


def test_a_stopped_jobs_checkpoint_is_disposed_with_its_shared_files(job_dir: Path) -> None:
    checkpoint_id, only = exclusive_shared(job_dir)
    assert not (job_dir / JOB_LOCK_FILE).exists()
    done = dispose(str(job_dir / f"chk-{checkpoint_id}"))
    assert done.exit_code == 0, done.output
    assert not only & shared_listing(*FileIO.for_path(str(job_dir)))


def test_a_newer_checkpoint_without_metadata_keeps_the_shared_files(job_dir: Path) -> None:
    checkpoint_id, only = exclusive_shared(job_dir)
    newer = job_dir / "chk-999999"
    newer.mkdir()  # being taken by a job dispose cannot see, or left by a killed one
    done = dispose("--json", str(job_dir / f"chk-{checkpoint_id}"))
    assert done.exit_code == 0 and "chk-999999 has no _metadata" in done.output, done.output
    assert only <= shared_listing(*FileIO.for_path(str(job_dir)))


def test_a_job_the_registry_knows_as_running_is_asked_too(job_dir: Path, tmp_path: Path) -> None:
    """A job directory without the lock file (an object store, another mount) of a job this
    user's registry lists as running: refused all the same."""
    registry = JobRegistry()
    job_id = job_dir.name
    registry.register(current_process_entry(job_id, "running-elsewhere", checkpoint_dir=str(job_dir.parent)))
    registry.update(job_id, status="RUNNING")
    checkpoint_id, _ = exclusive_shared(job_dir)
    done = dispose(str(job_dir / f"chk-{checkpoint_id}"))
    assert done.exit_code == 2 and f"pid {os.getpid()}" in done.output and "registered in" in done.output, done.output
    registry.update(job_id, status="CANCELED", end_time_ms=int(time.time() * 1000))
    assert dispose(str(job_dir / f"chk-{checkpoint_id}")).exit_code == 0
