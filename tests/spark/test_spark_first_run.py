"""The first export of a session: what a Python worker imports to unpickle the ``statekit``
data source, and the per-block work of a read. (The driver JVM's class archive, the largest
cut of a session's start and first export, is tested in ``test_spark_class_archive.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.state_columns import repeated as _repeated
from statekit.spark.worker_daemon import bundled_zips

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


def _package(site: Path, *, py4j: bool = True) -> list[str]:
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    if py4j:
        (site / "py4j").mkdir()
        (site / "py4j" / "__init__.py").write_text("")
    return [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]


def test_the_daemon_drops_only_zips_bundled_in_an_installed_pyspark(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zips = _package(site)
    assert bundled_zips([*zips, "/opt/spark/python/lib/pyspark.zip", str(site)]) == zips
    assert bundled_zips(zips) == []  # the installed package is not on the path: keep the zips
    bare = tmp_path / "bare"
    bare_zips = _package(bare, py4j=False)
    assert bundled_zips([*bare_zips, str(bare)]) == bare_zips[:1]  # no installed py4j: keep its zip
    (site / "pyspark" / "__init__.py").unlink()
    assert bundled_zips([*zips, str(site)]) == []  # not a package


def test_workers_import_pyspark_from_the_installed_package(spark: Any) -> None:
    from statekit.spark.session import map_in_arrow

    def where(batches: Any) -> Any:
        import py4j
        import pyarrow as pa
        import pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"pyspark": pyspark.__file__, "py4j": py4j.__file__}])

    rows = map_in_arrow(spark.range(1), where, "pyspark string, py4j string").collect()
    assert rows and all(".zip" not in row.pyspark and ".zip" not in row.py4j for row in rows), rows
