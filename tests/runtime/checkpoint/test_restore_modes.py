"""Restore modes (Flink's RestoreMode) with incremental RocksDB checkpoints.

no-claim (the default) never modifies or deletes a file of the restored checkpoint, however
many checkpoints follow and whatever the retention, and no later checkpoint references its
shared files (the first one after the restore is full); claim hands the restored checkpoint
to retention, which disposes it once subsumed, and the first checkpoint builds on it.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.shared_refs import shared_files_of
from statekit.runtime.checkpoint.restore_mode import RestoreMode, parse_restore_mode
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.errors import BadInputError

pytest.importorskip("rocksdict")

WORDCOUNT = str(Path(__file__).resolve().parents[3] / "examples" / "wordcount.py")
JOB_ID = "c1a1" * 8


def write_texts(directory: Path, files: int, seed: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(2000)]
    for f in range(files):
        lines = (" ".join(rnd.choice(words) for _ in range(10)) for _ in range(2000))
        (directory / f"part-{seed}-{f}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run(texts: Path, out: Path, chk: Path, *, retained: int, restore: str | None = None,
        mode: str = "no-claim") -> JobStatus:
    options = RunOptions(
        checkpoint_dir=str(chk), checkpoint_interval_ms=20, state_backend="rocksdb", incremental=True,
        retained_checkpoints=retained, job_id=JOB_ID, restore_path=restore, restore_mode=mode,
        job_args=("--input", str(texts), "--output", str(out)),
    )
    return run_job_file(WORDCOUNT, options)


def checkpoints(chk: Path) -> list[Path]:
    return sorted((chk / JOB_ID).glob("chk-*"), key=lambda p: int(p.name[4:]))


def fingerprint(chk: Path, checkpoint: Path) -> dict[str, str]:
    """sha256 of every file of ``checkpoint``: its directory and the shared files it names."""
    files = [p for p in checkpoint.rglob("*") if p.is_file()]
    metadata = SavepointReader.read(str(checkpoint)).metadata
    files += [chk / JOB_ID / "shared" / name for name in shared_files_of(metadata)]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture
def first_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A job directory whose one retained checkpoint has shared files; and a larger input."""
    texts = tmp_path / "texts"
    write_texts(texts, 2, seed=1)
    chk = tmp_path / "chk"
    assert run(texts, tmp_path / "out1", chk, retained=1) is JobStatus.FINISHED
    (restored,) = checkpoints(chk)
    assert shared_files_of(SavepointReader.read(str(restored)).metadata), "no incremental checkpoint was taken"
    write_texts(texts, 4, seed=2)  # more input: the restored job takes many checkpoints
    return texts, chk, restored


def test_no_claim_never_touches_the_restored_checkpoint(tmp_path: Path, first_run: tuple[Path, Path, Path]) -> None:
    texts, chk, restored = first_run
    before = fingerprint(chk, restored)
    restored_shared = shared_files_of(SavepointReader.read(str(restored)).metadata)
    assert run(texts, tmp_path / "out2", chk, retained=1, restore=str(restored)) is JobStatus.FINISHED
    later = [p for p in checkpoints(chk) if p != restored]
    assert later and int(later[-1].name[4:]) >= int(restored.name[4:]) + 3, "too few checkpoints followed"
    assert fingerprint(chk, restored) == before  # every file still there, byte for byte
    for checkpoint in later:
        assert not shared_files_of(SavepointReader.read(str(checkpoint)).metadata) & restored_shared


def test_claim_hands_the_restored_checkpoint_to_retention(tmp_path: Path, first_run: tuple[Path, Path, Path]) -> None:
    texts, chk, restored = first_run
    assert run(texts, tmp_path / "out2", chk, retained=1, restore=str(restored), mode="claim") is JobStatus.FINISHED
    assert not restored.exists(), "the claimed checkpoint was not disposed once subsumed"
    (latest,) = checkpoints(chk)
    assert int(latest.name[4:]) > int(restored.name[4:])


def test_claim_builds_the_first_incremental_checkpoint_on_the_restored_one(
        tmp_path: Path, first_run: tuple[Path, Path, Path]) -> None:
    texts, chk, restored = first_run
    restored_shared = shared_files_of(SavepointReader.read(str(restored)).metadata)
    assert run(texts, tmp_path / "out2", chk, retained=100, restore=str(restored), mode="claim") is JobStatus.FINISHED
    first = next(p for p in checkpoints(chk) if int(p.name[4:]) == int(restored.name[4:]) + 1)
    assert shared_files_of(SavepointReader.read(str(first)).metadata) & restored_shared


def test_no_claim_first_checkpoint_is_full(tmp_path: Path, first_run: tuple[Path, Path, Path]) -> None:
    texts, chk, restored = first_run
    restored_shared = shared_files_of(SavepointReader.read(str(restored)).metadata)
    assert run(texts, tmp_path / "out2", chk, retained=100, restore=str(restored)) is JobStatus.FINISHED
    first = next(p for p in checkpoints(chk) if int(p.name[4:]) == int(restored.name[4:]) + 1)
    first_shared = shared_files_of(SavepointReader.read(str(first)).metadata)
    assert first_shared and not first_shared & restored_shared


@pytest.mark.parametrize("text, mode", [("claim", RestoreMode.CLAIM), ("no-claim", RestoreMode.NO_CLAIM),
                                        ("NO_CLAIM", RestoreMode.NO_CLAIM), (None, RestoreMode.NO_CLAIM)])
def test_parse_restore_mode(text: str | None, mode: RestoreMode) -> None:
    assert parse_restore_mode(text) is mode


def test_parse_restore_mode_refuses_others() -> None:
    with pytest.raises(BadInputError, match="invalid restore mode 'legacy'; use claim or no-claim"):
        parse_restore_mode("legacy")


def test_the_command_lines_carry_the_restore_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    import statekit.runtime.control.submission as control
    from statekit.cli.main import cli
    from statekit.runtime.control.results import RunResult

    seen: list[RunOptions] = []

    def run_job(_path: str, options: RunOptions, **_: object) -> RunResult:
        seen.append(options)
        return RunResult(job_id=JOB_ID, name="job", state="FINISHED")

    monkeypatch.setattr(control, "run_job", run_job)
    assert CliRunner().invoke(cli, ["run", "-s", "/sp", "--restore-mode", "claim", "job.py"]).exit_code == 0
    assert CliRunner().invoke(cli, ["run", "-s", "/sp", "job.py"]).exit_code == 0
    assert [o.restore_mode for o in seen] == ["claim", "no-claim"]
    argv = control._run_argv("job.py", RunOptions(job_id=JOB_ID, restore_path="/sp", restore_mode="claim"), "/log")
    assert argv[argv.index("--restore-mode") + 1] == "claim"
    refused = CliRunner().invoke(cli, ["run", "-s", "/sp", "--restore-mode", "legacy", "job.py"])
    assert refused.exit_code == 2 and "'legacy' is not one of 'claim', 'no-claim'" in refused.output


@pytest.mark.parametrize("mode", ["claim", "no-claim"])
def test_a_restored_savepoint_is_disposed_only_when_claimed(tmp_path: Path, mode: str) -> None:
    texts = tmp_path / "texts"
    write_texts(texts, 1, seed=3)
    args = ("--input", str(texts), "--output", str(tmp_path / "out1"))
    assert run_job_file(WORDCOUNT, RunOptions(savepoint_on_finish=str(tmp_path / "sp"), job_args=args)) is JobStatus.FINISHED
    (savepoint,) = (tmp_path / "sp").iterdir()
    before = {str(p): p.read_bytes() for p in savepoint.rglob("*") if p.is_file()}
    write_texts(texts, 2, seed=4)
    options = RunOptions(restore_path=str(savepoint), restore_mode=mode, checkpoint_dir=str(tmp_path / "chk"),
                         checkpoint_interval_ms=20, retained_checkpoints=1,
                         job_args=("--input", str(texts), "--output", str(tmp_path / "out2")))
    assert run_job_file(WORDCOUNT, options) is JobStatus.FINISHED
    if mode == "claim":
        assert not savepoint.exists()
    else:
        assert {str(p): p.read_bytes() for p in savepoint.rglob("*") if p.is_file()} == before
