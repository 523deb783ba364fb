"""The first export of a session: what a Python worker imports to unpickle the ``statekit``
data source, and the per-block work of a read. (The driver JVM's class archive, the largest
cut of a session's start and first export, is tested in ``test_spark_class_archive.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from statekit.spark.source import _repeated

pytestmark = pytest.mark.spark


def test_a_planner_worker_imports_neither_the_snapshot_reader_nor_fsspec() -> None:
    code = (
        "import json, sys\n"
        "import statekit.spark.source\n"
        "heavy = ('fsspec', 'statekit.readers.savepoint_reader', 'statekit.statefmt.fileio', 'pandas')\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == []


def test_repeated_columns_are_int32_runs() -> None:
    column = _repeated([(3, 2), (5, 0), (7, 3)])
    assert str(column.type) == "int32" and column.to_pylist() == [3, 3, 7, 7, 7]
    assert _repeated([]).to_pylist() == [] and str(_repeated([]).type) == "int32"
