"""Fixtures over the golden Flink 2.3 snapshots in ``tests/golden/flink-2.3``.

The snapshots were written by Flink 2.3.0 (see that folder's README.md). The RocksDB
checkpoints reference their shared files by absolute ``file:`` paths of the machine that
wrote them; ``relocated_inline0`` builds a temporary copy whose paths point at the copy.

Test modules cannot import each other (pytest import mode "importlib"), so the paths are
served by the ``flink_golden`` fixture, keyed by the snapshot names below.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statekit.flink import relocate_flink_metadata

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the helpers of this directory are imported by name (pyflink_runs)
    sys.path.insert(0, str(HERE))

ROOT = Path(__file__).resolve().parents[1] / "golden" / "flink-2.3"


@dataclass(frozen=True)
class FlinkGolden:
    """Paths and known facts of the golden snapshots."""

    root: Path
    snapshots: dict[str, Path]
    jobs: dict[str, str]
    inline0_old_prefix: str = "file:/tmp/stackcheck/flink/out_rocksdb_noinline/checkpoints"

    def __getitem__(self, name: str) -> Path:
        return self.snapshots[name]


JOBS = {
    "hashmap": "962f676fad747434cac50f82ef230c8d",
    "rocksdb-incremental": "668cf752b24f4c4ca6b3d8c1e6f0f929",
    "rocksdb-incremental-inline0": "41a19bb2434264c1a64f6d54dac65a72",
}
SAVEPOINT_DIRS = {
    "hashmap": "savepoint-962f67-bfc4c25148ed",
    "rocksdb-incremental": "savepoint-668cf7-10a2b9713d30",
    "rocksdb-incremental-inline0": "savepoint-41a19b-c3d04ad8af31",
}
GOLDEN = FlinkGolden(
    root=ROOT,
    snapshots={
        **{f"{b}/chk-4": ROOT / b / "checkpoints" / job / "chk-4" for b, job in JOBS.items()},
        **{f"{b}/savepoint": ROOT / b / "savepoints" / d for b, d in SAVEPOINT_DIRS.items()},
    },
    jobs=JOBS,
)


@pytest.fixture(scope="session")
def flink_golden() -> FlinkGolden:
    """The golden Flink 2.3 snapshots."""
    return GOLDEN


@pytest.fixture
def relocated_inline0(tmp_path: Path) -> Path:
    """A copy of the inline0 checkpoint root whose chk-4 references the copied shared files.

    Returns the job directory ``<tmp>/checkpoints/<job-id>`` (with ``chk-4`` and ``shared``).
    """
    job = JOBS["rocksdb-incremental-inline0"]
    root = tmp_path / "checkpoints"
    shutil.copytree(ROOT / "rocksdb-incremental-inline0" / "checkpoints", root)
    meta = root / job / "chk-4" / "_metadata"
    meta.write_bytes(
        relocate_flink_metadata(meta.read_bytes(), GOLDEN.inline0_old_prefix, f"file:{root}")
    )
    return root / job


# ------------------------------------------------------------------ the PyFlink job fixtures

GOLDEN_ROOT = Path(__file__).resolve().parents[1] / "golden"


@dataclass(frozen=True)
class JobFixture:
    """One run of scripts/flink_fixture_job.py, as tests/golden/<name>/facts.json describes it."""

    name: str
    root: Path
    facts: dict[str, Any]

    @property
    def checkpoint(self) -> Path:
        """The retained checkpoint as committed: a moved one (its absolute paths name the work dir)."""
        return self.root / self.facts["checkpoint"]

    def savepoint(self, kind: str) -> Path:
        """The ``canonical`` or ``native`` savepoint."""
        return self.root / self.facts["savepoints"][kind]

    def relocated_checkpoint(self, tmp_path: Path) -> Path:
        """A copy of the fixture whose checkpoint names its own shared files (``relocate --auto``)."""
        from statekit.flink.relocation import relocate_moved_snapshot

        copy = tmp_path / self.name.replace("/", "-")
        if not copy.exists():
            shutil.copytree(self.root, copy)
            for path in copy.rglob("*"):
                path.chmod(path.stat().st_mode | 0o200)
            if "rocksdb" in self.name:  # heap checkpoints hold relative paths only
                relocate_moved_snapshot(str(copy / self.facts["checkpoint"]), force=True)
        return copy / self.facts["checkpoint"]


def _job_fixture(name: str) -> JobFixture:
    root = GOLDEN_ROOT / name
    return JobFixture(name, root, json.loads((root / "facts.json").read_text()))


JOB_FIXTURES = ("pyflink-2.3/rocksdb", "pyflink-2.3/hashmap", "pyflink-1.20/rocksdb")


@pytest.fixture(scope="session")
def pyflink_jobs() -> dict[str, JobFixture]:
    """The fixtures written by real PyFlink 2.3 and 1.20 (scripts/gen_flink_fixtures.py)."""
    return {name: _job_fixture(name) for name in JOB_FIXTURES}
