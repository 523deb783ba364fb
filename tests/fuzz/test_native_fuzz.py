"""Native RocksDB state with a damaged byte, through every offline command.

statekit: an incremental checkpoint (``chk-N`` beside its job's ``shared/``) and a native
savepoint of examples/wordcount.py (the ``native_snapshots`` fixture), one byte flipped in a
store file — an SST in ``shared/``, a private MANIFEST or OPTIONS file, an SST of the savepoint.
Apache Flink: the inline0 RocksDB checkpoint of ``tests/golden/flink-2.3`` relocated into the run
directory, one byte of a shared SST flipped.

Besides every invariant of :func:`fuzz_harness.check_run` (no traceback, one error line, nothing
touched, scratch removed), each command must end as the damage says: ``verify`` exit 1; every
command that reads the state (inspect, rescale, modify, diff) exit 2, never 0 with stale or lost
entries; the commands that never read a store's bytes (checkpoints list, dispose --dry-run, and
Flink's inspect, which reads only metadata) exit 0. Undamaged, every command exits 0.

In CI every mutation goes through ``verify`` and at least two rotating commands (every command at
least once per family of snapshots); ``test_exhaustive_native`` (``slow``, ``STATEKIT_FUZZ_EXHAUSTIVE``) runs
every mutation through every command.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fuzz_cases import FLINK_GOLDEN
from fuzz_harness import Command, Job, Outcome, RunDirs, report, run_jobs

EXHAUSTIVE = int(os.environ.get("STATEKIT_FUZZ_EXHAUSTIVE", "0") or 0)
MIN_ROTATING = 2  # in CI, commands per mutation besides verify (more when a family has few mutations)
INLINE0_JOB = "41a19bb2434264c1a64f6d54dac65a72"
INLINE0_OLD_PREFIX = "file:/tmp/stackcheck/flink/out_rocksdb_noinline/checkpoints"


def _p(path: Path) -> str:
    return str(path)


READERS = ("snap", "shared")
STATEKIT: tuple[tuple[Command, int], ...] = (
    (Command("verify", lambda d: ["verify", _p(d.snap)]), 1),
    (Command("inspect", lambda d: ["inspect", _p(d.snap)], writes=("tmp",)), 2),
    (Command("inspect-json", lambda d: ["--json", "inspect", _p(d.snap)], writes=("tmp",), json=True), 2),
    (Command("checkpoints-list", lambda d: ["checkpoints", "list", _p(d.parent)], reads=("parent",)), 0),
    # a checkpoint's dispose reads its job directory: the running job's lock, newer checkpoints' shared files
    (Command("dispose-dry-run", lambda d: ["dispose", "--dry-run", _p(d.snap)], reads=("snap", "shared", "parent")),
     0),
    (Command("rescale-p3", lambda d: ["rescale", _p(d.snap), "-p", "3", "-o", _p(d.out)],
             writes=("outdir", "tmp"), produces_output=True), 2),
    (Command("rescale-maxp64", lambda d: ["rescale", _p(d.snap), "--max-parallelism", "64", "-o", _p(d.out)],
             writes=("outdir", "tmp"), produces_output=True), 2),
    (Command("modify-remove-op", lambda d: ["modify", _p(d.snap), "--remove-operator", "source", "-o", _p(d.out)],
             writes=("outdir", "tmp"), produces_output=True), 2),
    (Command("diff", lambda d: ["diff", _p(d.snap), _p(d.other), "--operator", "counter", "--engine", "local"],
             reads=("snap", "shared", "other"), writes=("tmp",)), 2),
)
FLINK: tuple[tuple[Command, int], ...] = (
    (Command("verify", lambda d: ["verify", _p(d.snap)], writes=("tmp",)), 1),
    (Command("inspect", lambda d: ["inspect", _p(d.snap)]), 0),
    (Command("checkpoints-list", lambda d: ["checkpoints", "list", _p(d.parent)], reads=("parent",)), 0),
    (Command("dispose-dry-run", lambda d: ["dispose", "--dry-run", _p(d.snap)], lists=("parent",)), 0),
    (Command("diff", lambda d: ["diff", _p(d.snap), _p(d.other)], reads=("snap", "shared", "other"),
             writes=("tmp",)), 2),
)


@dataclass(frozen=True)
class Damage:
    """One byte flipped in a store file: ``pick`` chooses the file among the snapshot's files."""

    name: str
    what: str
    pick: Callable[[Path], Path]
    at: float  # where in the file, as a fraction of its size


def _largest(pattern: str) -> Callable[[Path], Path]:
    def pick(root: Path) -> Path:
        return max(root.glob(pattern), key=lambda p: (p.stat().st_size, p.name))
    return pick


def _flink_sst(parent: Path) -> Path:
    from statekit.flink.storage import load_snapshot, resolve_stream

    snapshot = load_snapshot(str(parent / "chk-4"))
    files = [(named.local_path, next(named.handle.leaves(), named.handle))
             for op in snapshot.metadata.operators for sub in op.subtasks for h in sub.keyed_handles
             for named in h.shared + h.private if named.handle is not None]
    sst = max((leaf for local, leaf in files if local.endswith(".sst")), key=lambda leaf: leaf.size)
    return Path(resolve_stream(snapshot, sst).path)


CHECKPOINT_DAMAGE = (
    Damage("shared-sst-start", "a byte near the start of the largest shared SST", _largest("shared/*/*.sst"), 0.05),
    Damage("shared-sst-end", "a byte near the end (index, footer) of the largest shared SST",
           _largest("shared/*/*.sst"), 0.97),
    Damage("private-manifest", "a byte of a private MANIFEST", _largest("chk-*/*/_native/*/MANIFEST-*"), 0.5),
    Damage("private-options", "a byte of a private OPTIONS file", _largest("chk-*/*/_native/*/OPTIONS-*"), 0.5),
)
SAVEPOINT_DAMAGE = (
    Damage("savepoint-sst", "a byte of the largest SST of a native savepoint", _largest("*/_native/*/*.sst"), 0.5),
    Damage("savepoint-manifest", "a byte of a native savepoint's MANIFEST", _largest("*/_native/*/MANIFEST-*"),
           0.5),
)
FLINK_DAMAGE = (
    Damage("flink-sst-start", "a byte near the start of the largest shared SST", _flink_sst, 0.1),
    Damage("flink-sst-middle", "a byte in the middle of the largest shared SST", _flink_sst, 0.5),
    Damage("flink-sst-end", "a byte near the end (index, footer) of the largest shared SST", _flink_sst, 0.97),
)


def _flip(path: Path, at: float) -> None:
    data = bytearray(path.read_bytes())
    data[min(len(data) - 1, int(len(data) * at))] ^= 0x01
    path.write_bytes(bytes(data))


def _prepare_statekit(snapshots: Any, kind: str, damage: Damage | None) -> Callable[[RunDirs], None]:
    def prepare(dirs: RunDirs) -> None:
        if kind == "checkpoint":
            shutil.copytree(snapshots.checkpoint, dirs.snap)
            shutil.copytree(snapshots.checkpoint.parent / "shared", dirs.shared)
        else:
            shutil.copytree(snapshots.savepoint, dirs.snap)
            dirs.shared.mkdir()
        dirs.canary.mkdir()
        (dirs.canary / "secret.txt").write_text("canary: nothing may read, change or delete this\n")
        dirs.outside.mkdir()
        (dirs.outside / "secret.txt").write_text("outside: nothing may read, change or delete this\n")
        shutil.copytree(snapshots.canonical, dirs.other)
        if damage is not None:
            _flip(damage.pick(dirs.parent if kind == "checkpoint" else dirs.snap), damage.at)
    return prepare


def _prepare_flink(damage: Damage | None) -> Callable[[RunDirs], None]:
    from statekit.flink import relocate_flink_metadata

    source = FLINK_GOLDEN / "rocksdb-incremental-inline0"

    def prepare(dirs: RunDirs) -> None:
        shutil.copytree(source / "checkpoints" / INLINE0_JOB, dirs.parent)
        meta = dirs.snap / "_metadata"
        meta.write_bytes(relocate_flink_metadata(meta.read_bytes(), f"{INLINE0_OLD_PREFIX}/{INLINE0_JOB}",
                                                 f"file:{dirs.parent}"))
        dirs.canary.mkdir()
        (dirs.canary / "secret.txt").write_text("canary: nothing may read, change or delete this\n")
        dirs.outside.mkdir()
        (dirs.outside / "secret.txt").write_text("outside: nothing may read, change or delete this\n")
        (savepoint,) = (source / "savepoints").iterdir()
        shutil.copytree(savepoint, dirs.other)
        if damage is not None:
            _flip(damage.pick(dirs.parent), damage.at)
    return prepare


@dataclass(frozen=True)
class Case:
    name: str
    family: str  # checkpoint, savepoint or flink
    damage: Damage | None

    @property
    def commands(self) -> tuple[tuple[Command, int], ...]:
        return FLINK if self.family == "flink" else STATEKIT

    def expected(self, command: Command, code: int) -> int:
        return 0 if self.damage is None else code


CASES = [Case(f"{family}-intact", family, None) for family in ("checkpoint", "savepoint", "flink")] + [
    Case(f"{family}-{d.name}", family, d)
    for family, damages in (("checkpoint", CHECKPOINT_DAMAGE), ("savepoint", SAVEPOINT_DAMAGE), ("flink", FLINK_DAMAGE))
    for d in damages]


def _in_ci(case: Case) -> tuple[tuple[Command, int], ...]:
    """Intact: every command; damaged: verify and the next commands in turn, so that the damaged
    cases of a family go through every command between them."""
    commands = case.commands
    if case.damage is None:
        return commands
    same = [c for c in CASES if c.family == case.family and c.damage is not None]
    rest = commands[1:]
    share = max(MIN_ROTATING, -(-len(rest) // len(same)))
    index = same.index(case)
    return (commands[0],) + tuple(rest[(index * share + j) % len(rest)] for j in range(share))


def _jobs(case: Case, commands: tuple[tuple[Command, int], ...], snapshots: Any,
          tmp: pytest.TempPathFactory) -> list[tuple[Job, int]]:
    if case.family == "flink":
        name, prepare = "chk-4", _prepare_flink(case.damage)
    else:
        snapshot = snapshots.checkpoint if case.family == "checkpoint" else snapshots.savepoint
        name, prepare = snapshot.name, _prepare_statekit(snapshots, case.family, case.damage)
    what = case.damage.what if case.damage else "none (the snapshot as written)"
    return [(Job(case.name, what, command, RunDirs(tmp.mktemp(f"native-{case.name}-{command.name}"), name), prepare),
             case.expected(command, code)) for command, code in commands]


def _check(planned: list[tuple[Job, int]]) -> list[Outcome]:
    outcomes = run_jobs([job for job, _ in planned])
    for outcome, (_, code) in zip(outcomes, planned):
        rc = outcome.result.returncode
        if rc != code and not outcome.result.hung:
            outcome.problems.append(f"exit {rc}, expected {code} ({'damaged' if code else 'intact'} native state)")
    return outcomes


@pytest.fixture(scope="module")
def ci_outcomes(native_snapshots: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Outcome]]:
    planned = [job for case in CASES for job in _jobs(case, _in_ci(case), native_snapshots, tmp_path_factory)]
    grouped: dict[str, list[Outcome]] = {case.name: [] for case in CASES}
    for outcome in _check(planned):
        grouped[outcome.case].append(outcome)
    return grouped


def test_ci_covers_every_command_of_each_family() -> None:
    for family in ("checkpoint", "savepoint", "flink"):
        damaged = [c for c in CASES if c.family == family and c.damage is not None]
        covered = {command.name for case in damaged for command, _ in _in_ci(case)}
        assert covered == {command.name for command, _ in damaged[0].commands}, family


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_native_state(case: str, ci_outcomes: dict[str, list[Outcome]]) -> None:
    runs = ci_outcomes[case]
    assert runs
    assert not any(o.failed for o in runs), report(runs)


@pytest.mark.slow
@pytest.mark.skipif(EXHAUSTIVE <= 0, reason="set STATEKIT_FUZZ_EXHAUSTIVE=N to run")
def test_exhaustive_native(native_snapshots: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    planned = [job for case in CASES for job in _jobs(case, case.commands, native_snapshots, tmp_path_factory)]
    runs = _check(planned)
    assert not any(o.failed for o in runs), report(runs)
