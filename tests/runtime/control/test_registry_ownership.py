"""The job registry's ownership rules: another user's job is refused (exit 2, not a crash), a
crashed job's id may be reused while a live one may not, job ids are validated wherever they
enter, and STATEKIT_HOME is kept private."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.runtime.control import client as control
from statekit.runtime.control import registry as registry_module
from statekit.runtime.control.registry import JobEntry, JobRegistry, current_process_entry, new_job_id, process_alive
from statekit.runtime.control.rest import JobRestServer
from statekit.runtime.dataflow.graph import JobTopology, OperatorDescription
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.statefmt.errors import BadInputError, JobError

NOBODY = 65534
TINY_JOB = '''
from statekit.runtime.dataflow.environment import get_execution_environment
from statekit.runtime.connectors.sinks import DiscardingSink
env = get_execution_environment()
env.from_collection([1, 2, 3]).uid("numbers").sink_to(DiscardingSink()).uid("sink")
env.execute("tiny")
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def tiny_job(tmp_path: Path) -> str:
    path = tmp_path / "tiny.py"
    path.write_text(TINY_JOB)
    return str(path)


def dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def stale_registration(job_id: str, status: str = "RUNNING") -> JobEntry:
    """A registration left behind by a process that is gone (a crashed or killed job)."""
    entry = dataclasses.replace(current_process_entry(job_id, "crashed"), pid=dead_pid(), pid_start=None, status=status)
    JobRegistry().register(entry)
    return entry


# -- 2: another user's job ---------------------------------------------------------------------


class _Stub:
    def __init__(self) -> None:
        self.calls = 0

    def trigger_savepoint(self, target_dir: str | None, *, stop: bool, drain: bool) -> concurrent.futures.Future[str]:
        self.calls += 1
        raise AssertionError("another user's job must not be reached")

    def cancel(self) -> None:
        self.calls += 1

    def checkpoint_stats(self) -> dict[str, object]:
        return {}


@pytest.fixture
def foreign_job(home: Path) -> Iterator[tuple[str, _Stub]]:
    """A running job (REST API served) whose registry directory belongs to another user.

    As root (file permissions do not stop root) the directory is given to uid 65534; as any
    other user it is made unreadable, which is what another user's 0700 directory is to us.
    """
    stub = _Stub()
    handle = JobHandle(new_job_id(), "theirs", JobTopology.of(OperatorDescription("op", "op", 1)), None, stub)
    handle.set_status(JobStatus.RUNNING)
    registry = JobRegistry()
    token = registry.register(current_process_entry(handle.job_id, "theirs"))
    server = JobRestServer(handle, token).start()
    registry.update(handle.job_id, status="RUNNING", host="127.0.0.1", port=server.port)
    job_dir = registry.job_dir(handle.job_id)
    if os.geteuid() == 0:
        for path in (job_dir, job_dir / "token", job_dir / "job.json"):
            os.chown(path, NOBODY, NOBODY)
    else:
        job_dir.chmod(0)
    yield handle.job_id, stub
    job_dir.chmod(0o700)
    server.close()


@pytest.mark.parametrize("command", [["savepoint", "{id}", "{tmp}"], ["stop", "{id}", "-p", "{tmp}"],
                                     ["cancel", "{id}"], ["savepoint", "{prefix}", "{tmp}"]])
def test_controlling_another_users_job_is_refused(foreign_job: tuple[str, _Stub], tmp_path: Path,
                                                  command: list[str]) -> None:
    job_id, stub = foreign_job
    args = [a.format(id=job_id, prefix=job_id[:8], tmp=tmp_path) for a in command]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"statekit: error: job {job_id} belongs to another user")
    assert "only the user who started it can control it" in line
    assert stub.calls == 0


def test_unreadable_registry_entries_are_another_users(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a non-root user meets: another user's 0700 job directory denies every read (EACCES)."""
    registry = JobRegistry()
    theirs, mine = "ab" + new_job_id()[2:], "cd" + new_job_id()[2:]
    for job_id in (theirs, mine):
        registry.register(current_process_entry(job_id, job_id[:2]))
    denied_dir = registry.job_dir(theirs)

    def denied(name: str) -> Any:
        real = getattr(Path, name)

        def method(self: Path, *args: Any, **kwargs: Any) -> Any:
            if denied_dir in self.parents:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *args, **kwargs)
        return method

    for name in ("read_bytes", "read_text", "is_file", "exists"):
        monkeypatch.setattr(Path, name, denied(name))
    for reference in (theirs, theirs[:4]):
        with pytest.raises(JobError, match=rf"^job {theirs} belongs to another user"):
            registry.find(reference)
    with pytest.raises(JobError, match=rf"^job {theirs} belongs to another user"):
        registry.token(theirs)
    assert [e.job_id for e in registry.entries()] == [mine]
    assert registry.find("cd").job_id == mine


# -- 6: stale registrations, live ones, job id format -------------------------------------------


def test_a_crashed_jobs_registration_is_taken_over(home: Path) -> None:
    registry = JobRegistry()
    job_id = new_job_id()
    old = stale_registration(job_id)
    old_token = registry.token(job_id)
    token = registry.register(current_process_entry(job_id, "restarted"))
    entry = registry.get(job_id)
    assert (entry.name, entry.pid, entry.status) == ("restarted", os.getpid(), "CREATED")
    assert token != old_token and registry.token(job_id) == token and old.pid != os.getpid()
    assert stat.S_IMODE((registry.job_dir(job_id) / "token").stat().st_mode) == 0o600


def test_a_live_registration_is_still_refused(home: Path) -> None:
    registry = JobRegistry()
    job_id = new_job_id()
    token = registry.register(current_process_entry(job_id, "alive"))
    with pytest.raises(JobError, match=rf"^job {job_id} is already registered in .* by process {os.getpid()}, "
                                       "which is still running"):
        registry.register(current_process_entry(job_id, "second"))
    assert registry.token(job_id) == token and registry.get(job_id).name == "alive"


def test_run_with_the_job_id_of_a_crashed_job(home: Path, tiny_job: str) -> None:
    job_id = new_job_id()
    stale_registration(job_id)
    runner = CliRunner()
    result = runner.invoke(cli, ["--json", "run", "--job-id", job_id, tiny_job])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["job_id"] == job_id
    entry = JobRegistry().get(job_id)
    assert (entry.status, entry.pid, entry.name) == ("FINISHED", os.getpid(), "tiny")

    live = new_job_id()
    JobRegistry().register(current_process_entry(live, "alive"))
    refused = runner.invoke(cli, ["run", "--job-id", live, tiny_job])
    assert refused.exit_code == 2
    assert refused.stderr.strip().startswith(f"statekit: error: job {live} is already registered")
    assert JobRegistry().get(live).name == "alive"


FAKE_JOB = '''
import sys
from statekit.runtime.dataflow.graph import JobTopology, OperatorDescription
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.runtime.dataflow.run_options import get_run_options, notify_job_listeners

class Master:
    def trigger_savepoint(self, target_dir, *, stop, drain):
        raise NotImplementedError

    def cancel(self):
        handle.set_status(JobStatus.CANCELED)

    def checkpoint_stats(self):
        return {}

handle = JobHandle(get_run_options().job_id, "fake", JobTopology.of(OperatorDescription("op", "op", 1)), None, Master())
notify_job_listeners(handle)
handle.set_status(JobStatus.RUNNING)
handle.wait(float(sys.argv[1]))
handle.set_status(JobStatus.FINISHED)
'''


def test_detached_restart_waits_for_its_own_registration(home: Path, tmp_path: Path) -> None:
    job = tmp_path / "fake.py"
    job.write_text(FAKE_JOB)
    job_id = new_job_id()
    stale = stale_registration(job_id, status="FINISHED")  # an old run that ended, then the id is reused
    env = {**os.environ, "STATEKIT_HOME": str(home)}
    submitted = subprocess.run([sys.executable, "-m", "statekit.cli.main", "--json", "run", "--detached",
                                "--job-id", job_id, str(job), "60"], env=env, capture_output=True, text=True, timeout=60)
    entry = JobRegistry().get(job_id)
    try:
        assert submitted.returncode == 0, submitted.stderr
        assert json.loads(submitted.stdout)["state"] == "RUNNING"
        assert entry.status == "RUNNING" and entry.pid != stale.pid and process_alive(entry.pid, entry.pid_start)
    finally:
        if process_alive(entry.pid, entry.pid_start) and entry.pid != os.getpid():
            os.kill(entry.pid, signal.SIGKILL)


@pytest.mark.parametrize("job_id", ["0" * 31, "0" * 33, "A" * 32, "0" * 32 + "\n", "\n" + "0" * 32, "../" + "0" * 29,
                                    ".", "..", "", "0" * 16 + "/" + "0" * 15, "g" * 32])
def test_job_ids_are_validated(job_id: str) -> None:
    with pytest.raises(BadInputError, match=r"^invalid job id .*: expected 32 lower-case hex characters$"):
        registry_module.check_job_id(job_id)
    with pytest.raises(BadInputError, match="invalid job id"):
        JobRegistry("/nonexistent").job_dir(job_id)


def test_job_ids_are_validated_at_every_entry(home: Path, tiny_job: str) -> None:
    bad = "0" * 32 + "\n"
    result = CliRunner().invoke(cli, ["run", "--job-id", bad, tiny_job])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"statekit: error: invalid job id {bad!r}: expected 32 lower-case hex characters"
    assert not (home / "jobs").exists() or not list((home / "jobs").iterdir())
    assert registry_module.check_job_id("0123456789abcdef" * 2) == "0123456789abcdef" * 2

    from statekit.runtime.connectors.sinks import DiscardingSink
    from statekit.runtime.dataflow.environment import StreamEnvironment
    from statekit.runtime.dataflow.run_options import RunOptions, set_run_options

    env = StreamEnvironment()
    env.from_collection([1]).uid("numbers").sink_to(DiscardingSink()).uid("sink")
    set_run_options(RunOptions(job_id=bad))
    try:
        with pytest.raises(BadInputError, match="invalid job id"):
            env.execute("bad id")
    finally:
        set_run_options(None)


def test_rest_refuses_malformed_job_ids_with_400() -> None:
    import urllib.error
    import urllib.request

    handle = JobHandle(new_job_id(), "j", JobTopology.of(OperatorDescription("op", "op", 1)), None, _Stub())
    server = JobRestServer(handle, "t").start()
    try:
        for path, code in ((f"/jobs/{'0' * 32}", 404), ("/jobs/not-a-job-id", 400), (f"/jobs/{'0' * 31}/checkpoints", 400),
                           (f"/jobs/{handle.job_id.upper()}", 400)):
            request = urllib.request.Request(server.url + path, headers={"Authorization": "Bearer t"})
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(request, timeout=5)
            assert answer.value.code == code, path
            body = json.loads(answer.value.read())
            if code == 400:
                assert body["errors"][0].startswith("invalid job id") and "32 lower-case hex" in body["errors"][0]
    finally:
        server.close()


# -- 7: a private STATEKIT_HOME -----------------------------------------------------------------


def test_a_loose_home_is_tightened(home: Path) -> None:
    home.mkdir(mode=0o755)
    (home / "jobs").mkdir(mode=0o775)
    home.chmod(0o755)
    (home / "jobs").chmod(0o775)
    job_id = new_job_id()
    JobRegistry().register(current_process_entry(job_id, "j"))
    for path in (home, home / "jobs", home / "jobs" / job_id):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_a_shared_or_foreign_home_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_job: str) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("STATEKIT_HOME", str(shared))
    result = CliRunner().invoke(cli, ["run", tiny_job])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"statekit: error: {shared}: is a shared directory (mode 1777); the job registry "
                                     "keeps tokens and must be private: set STATEKIT_HOME to a directory of your own")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777 and not (shared / "jobs").exists()

    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, NOBODY, NOBODY)
    else:
        foreign = Path("/")  # root's: never ours, never changed (the check refuses before any change)
    with pytest.raises(BadInputError, match=r"belongs to another user \(uid \d+\); the job registry keeps tokens"):
        JobRegistry(foreign).prepare(new_job_id())
    if os.geteuid() == 0:
        assert not (foreign / "jobs").exists()


def test_list_and_control_still_work_after_a_crash_and_takeover(home: Path) -> None:
    """The crashed registration shows CRASHED until it is taken over; then the new owner is listed."""
    job_id = new_job_id()
    stale_registration(job_id)
    assert JobRegistry().get(job_id).status == "CRASHED"
    with pytest.raises(JobError, match=r"\(it crashed: process \d+ is gone\)"):
        control.running_job(job_id)
    JobRegistry().register(current_process_entry(job_id, "again"))
    [entry] = JobRegistry().entries()
    assert (entry.job_id, entry.status, entry.pid) == (job_id, "CREATED", os.getpid())
