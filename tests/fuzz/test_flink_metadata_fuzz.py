"""Real Apache Flink 2.3 ``_metadata`` files, damaged byte-wise, through the offline commands.

Flink's ``_metadata`` carries no checksum, so a damaged file may still parse (with other
values); whatever it says, ``inspect``, ``inspect --json``, ``verify``, ``checkpoints list``
(of the directory holding the snapshot) and ``dispose --dry-run`` must end with exit 0, 1
or 2 and one error line, in time and memory, without touching anything (see
:mod:`fuzz_harness`). The snapshots are the committed ``tests/golden/flink-2.3`` (the same
files as ``../shared/fixtures/flink-2.3``).

In CI: every snapshot unchanged through three commands (rotating); a quarter of the structure-aware
mutations (:func:`fuzz_cases.flink_targeted`, a different quarter per snapshot, so that each
kind of mutation is in) and a seeded random one per snapshot, each through one rotating
command. ``test_exhaustive_flink`` (``slow``, ``STATEKIT_FUZZ_EXHAUSTIVE=N``) runs every snapshot
unchanged and with every targeted and N random mutations through every command.
"""

from __future__ import annotations

import os

import pytest
from fuzz_cases import (
    ByteMutation,
    FlinkSnapshot,
    flink_random,
    flink_snapshots,
    flink_targeted,
    prepare_flink,
)
from fuzz_harness import (
    FLINK_COMMANDS,
    Command,
    Job,
    Outcome,
    RunDirs,
    report,
    run_cases,
    run_jobs,
    selected_cases,
)

SEED = os.environ.get("STATEKIT_FUZZ_SEED", "statekit-fuzz-1")
RANDOM_PER_SNAPSHOT = 1  # in CI
BASELINE_COMMANDS = 3  # in CI, each unchanged snapshot goes through 3 of the 5 commands (rotating)
CI_SHARE = 4  # in CI, every fourth targeted mutation of a snapshot (shifted per snapshot)
EXHAUSTIVE = int(os.environ.get("STATEKIT_FUZZ_EXHAUSTIVE", "0") or 0)

SNAPSHOTS = {s.name: s for s in flink_snapshots()}
TARGETED = {f"{s.name}:{m.name}": (s, m) for s in SNAPSHOTS.values() for m in flink_targeted(s.metadata)}
RANDOM = {f"{s.name}:random-{i}": (s, flink_random(s.metadata, f"{SEED}-{s.name}-{i}"))
          for s in SNAPSHOTS.values() for i in range(RANDOM_PER_SNAPSHOT)}
IN_CI = [f"{s.name}:{m.name}" for i, s in enumerate(SNAPSHOTS.values())
         for j, m in enumerate(flink_targeted(s.metadata)) if (i + j) % CI_SHARE == 0]
ROTATING = IN_CI + list(RANDOM)


def _plan(case: str) -> tuple[FlinkSnapshot, ByteMutation | None, tuple[Command, ...]]:
    if case in SNAPSHOTS:
        i, n = list(SNAPSHOTS).index(case), len(FLINK_COMMANDS)
        return SNAPSHOTS[case], None, tuple(FLINK_COMMANDS[(i + j) % n] for j in range(BASELINE_COMMANDS))
    snapshot, mutation = TARGETED.get(case) or RANDOM[case]
    return snapshot, mutation, (FLINK_COMMANDS[ROTATING.index(case) % len(FLINK_COMMANDS)],)


def _jobs(case: str, snapshot: FlinkSnapshot, mutation: ByteMutation | None, commands: tuple[Command, ...],
          tmp: pytest.TempPathFactory) -> list[Job]:
    what = f"{snapshot.name}: " + (mutation.what if mutation else "none (the file as Flink wrote it)")
    slug = case.replace(":", "-")[:40]
    return [Job(case, what, c, RunDirs(tmp.mktemp(f"flink-{slug}-{c.name}"), snapshot.snapshot),
                prepare_flink(snapshot, mutation))
            for c in commands]


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Outcome]]:
    def jobs_of(case: str) -> list[Job]:
        snapshot, mutation, commands = _plan(case)
        return _jobs(case, snapshot, mutation, commands, tmp_path_factory)

    return run_cases(selected_cases(request), jobs_of)


def test_every_golden_snapshot_is_found() -> None:
    assert sorted(SNAPSHOTS) == sorted(
        f"{backend}-{kind}" for backend in ("hashmap", "rocksdb-incremental", "rocksdb-incremental-inline0")
        for kind in ("checkpoint", "savepoint"))
    assert all(any(name.startswith(s + ":max-parallelism") for name in TARGETED) for s in SNAPSHOTS), \
        "the keyed operator's parallelism fields were not found in every snapshot"


@pytest.mark.parametrize("case", sorted(SNAPSHOTS))
def test_unchanged_flink_snapshot(case: str, outcomes: dict[str, list[Outcome]]) -> None:
    runs = outcomes[case]
    assert len(runs) == BASELINE_COMMANDS
    assert not any(o.failed for o in runs), report(runs)
    assert all(o.result.returncode in (0, 1) for o in runs), report([o for o in runs if o.result.returncode not in (0, 1)])


@pytest.mark.parametrize("case", IN_CI)
def test_targeted_flink_mutation(case: str, outcomes: dict[str, list[Outcome]]) -> None:
    runs = outcomes[case]
    assert runs
    assert not any(o.failed for o in runs), report(runs)


@pytest.mark.parametrize("case", list(RANDOM))
def test_random_flink_mutation(case: str, outcomes: dict[str, list[Outcome]]) -> None:
    runs = outcomes[case]
    assert runs
    assert not any(o.failed for o in runs), report(runs)


@pytest.mark.slow
@pytest.mark.skipif(EXHAUSTIVE <= 0, reason="set STATEKIT_FUZZ_EXHAUSTIVE=N (random cases per snapshot) to run")
def test_exhaustive_flink(tmp_path_factory: pytest.TempPathFactory) -> None:
    jobs = [job for s in SNAPSHOTS.values() for job in _jobs(s.name, s, None, FLINK_COMMANDS, tmp_path_factory)]
    for snapshot in SNAPSHOTS.values():
        mutations = flink_targeted(snapshot.metadata) + [
            flink_random(snapshot.metadata, f"{SEED}-{snapshot.name}-x{i}") for i in range(EXHAUSTIVE)]
        for m in mutations:
            jobs += _jobs(f"{snapshot.name}:{m.name}", snapshot, m, FLINK_COMMANDS, tmp_path_factory)
    runs = run_jobs(jobs)
    assert not any(o.failed for o in runs), report(runs)
