"""Mutated statekit ``_metadata`` (re-wrapped with a valid CRC) through every offline command.

Each case is a mutation of a valid savepoint (:mod:`fuzz_cases`); each run is one command on
a fresh copy in a limited, audited child process, checked by :func:`fuzz_harness.check_run`.
In CI each mutation goes through the commands its ``ci`` field names (where it matters) or
one rotating command; ``test_exhaustive`` (``slow``, ``STATEKIT_FUZZ_EXHAUSTIVE=N``) runs every
mutation and N random ones through every command.

    STATEKIT_FUZZ_SEED=...            seed of the random cases (default below)
    STATEKIT_FUZZ_EXHAUSTIVE=200      run the exhaustive variant with 200 random mutations
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fuzz_cases import (
    SNAPSHOT_NAME,
    STATE_FILE,
    TARGETED,
    Mutation,
    file_entry,
    prepare_statekit,
    random_mutation,
)
from fuzz_harness import (
    STATEKIT_COMMANDS,
    Command,
    Job,
    Outcome,
    RunDirs,
    command_named,
    report,
    run_cases,
    run_jobs,
    selected_cases,
)

SEED = os.environ.get("STATEKIT_FUZZ_SEED", "statekit-fuzz-1")
RANDOM_CASES = 6  # in CI, each through one command
EXHAUSTIVE = int(os.environ.get("STATEKIT_FUZZ_EXHAUSTIVE", "0") or 0)

BASELINE = Mutation("baseline", "none (the valid snapshot)")
BY_NAME = {m.name: m for m in TARGETED}
assert len(BY_NAME) == len(TARGETED), "mutation names must be unique"
RANDOM_NAMES = [f"random-{i}" for i in range(RANDOM_CASES)]
ROTATING = [m.name for m in TARGETED if m.ci is None]
IN_CI = [m.name for m in TARGETED if m.ci != ()]


def _rotating(index: int, count: int) -> tuple[Command, ...]:
    n = len(STATEKIT_COMMANDS)
    return tuple(STATEKIT_COMMANDS[(index * count + j) % n] for j in range(count))


def _plan(case: str, base_body: Any) -> tuple[Mutation, tuple[Command, ...]]:
    """The mutation of a case and the commands it goes through in CI."""
    if case == BASELINE.name:
        return BASELINE, STATEKIT_COMMANDS
    if case in BY_NAME:
        mutation = BY_NAME[case]
        if mutation.ci is not None:
            return mutation, tuple(command_named(STATEKIT_COMMANDS, name) for name in mutation.ci)
        return mutation, _rotating(ROTATING.index(case), 1)
    index = RANDOM_NAMES.index(case)
    return random_mutation(f"{SEED}-{index}", base_body), _rotating(index + 3, 1)


def _jobs(case: str, mutation: Mutation, commands: tuple[Command, ...], base: Path, body: Any,
          tmp: pytest.TempPathFactory) -> list[Job]:
    prepare = prepare_statekit(base, body, mutation)
    return [Job(case, mutation.what, command, RunDirs(tmp.mktemp(f"{case[:40]}-{command.name}"), SNAPSHOT_NAME),
                prepare)
            for command in commands]


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, base_snapshot: Path, base_body: Any,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Outcome]]:
    def jobs_of(case: str) -> list[Job]:
        mutation, commands = _plan(case, base_body)
        return _jobs(case, mutation, commands, base_snapshot, base_body, tmp_path_factory)

    return run_cases(selected_cases(request), jobs_of)


def test_base_snapshot_is_what_the_mutations_expect(base_body: Any) -> None:
    ops = base_body["operators"]
    assert [op["uid"] for op in ops] == ["counter", "source"]
    assert (ops[0]["parallelism"], ops[0]["max_parallelism"], base_body["checkpoint_id"]) == (2, 8, 0)
    assert file_entry(base_body) == {**file_entry(base_body), "state": "count", "path": STATE_FILE}
    assert all(len(st["files"]) == 3 for st in ops[0]["subtasks"])
    assert file_entry(base_body, op=1)["state"] == "offsets"


@pytest.mark.parametrize("case", [BASELINE.name])
def test_valid_snapshot_passes_every_command(case: str, outcomes: dict[str, list[Outcome]]) -> None:
    runs = outcomes[case]
    assert len(runs) == len(STATEKIT_COMMANDS)
    assert not any(o.failed for o in runs), report(runs)
    codes = {o.command.name: o.result.returncode for o in runs}
    assert codes == {c.name: 0 for c in STATEKIT_COMMANDS}, codes


@pytest.mark.parametrize("case", IN_CI)
def test_targeted_mutation(case: str, outcomes: dict[str, list[Outcome]]) -> None:
    runs = outcomes[case]
    assert runs
    assert not any(o.failed for o in runs), report(runs)


@pytest.mark.parametrize("case", RANDOM_NAMES)
def test_random_mutation(case: str, outcomes: dict[str, list[Outcome]]) -> None:
    runs = outcomes[case]
    assert runs
    assert not any(o.failed for o in runs), report(runs)


@pytest.mark.slow
@pytest.mark.skipif(EXHAUSTIVE <= 0, reason="set STATEKIT_FUZZ_EXHAUSTIVE=N (random cases) to run")
def test_exhaustive(base_snapshot: Path, base_body: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    mutations = [BASELINE, *TARGETED] + [random_mutation(f"{SEED}-x{i}", base_body) for i in range(EXHAUSTIVE)]
    jobs = [job for m in mutations
            for job in _jobs(m.name, m, STATEKIT_COMMANDS, base_snapshot, base_body, tmp_path_factory)]
    runs = run_jobs(jobs)
    assert not any(o.failed for o in runs), report(runs)
