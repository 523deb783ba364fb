"""statekit ships itself to executors: the zip holds every package an executor imports (no JVM here)."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from statekit.spark.shipping import EXECUTOR_PACKAGES, build_package_zip, is_local_master, ship_package


def test_embedded_masters_ship_nothing() -> None:
    assert all(is_local_master(m) for m in ("local", "local[2]", "local[*]", "local[2,3]"))
    assert not any(is_local_master(m) for m in ("spark://127.0.0.1:7077", "yarn", "k8s://https://k", "localhost"))
    assert ship_package(None, "local[2]") is None  # type: ignore[arg-type]  # no session needed


def test_the_zip_runs_where_statekit_is_not_installed(tmp_path: Path, cluster_helpers: Any) -> None:
    path = build_package_zip(str(tmp_path))
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    assert "statekit/__init__.py" in names
    assert {f"statekit/{p}/__init__.py" for p in EXECUTOR_PACKAGES} <= names
    assert "statekit/spark/source.py" in names and not any(n.startswith("statekit/cli/") for n in names)
    assert not any("__pycache__" in n or not n.endswith(".py") for n in names)
    python = cluster_helpers.python_without_statekit(tmp_path)
    code = ("import statekit.spark.source, statekit.readers.savepoint_reader, statekit.flink.decoding; "
            "print(statekit.spark.source.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shipped = subprocess.run([python, "-c", code], env={**env, "PYTHONPATH": path}, capture_output=True, text=True,
                             check=False)
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stdout.strip() == f"{path}/statekit/spark/source.py"
    without = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert without.returncode != 0 and "No module named 'statekit'" in without.stderr


@pytest.mark.parametrize("package", EXECUTOR_PACKAGES)
def test_every_module_of_the_package_is_in_the_zip(tmp_path: Path, package: str) -> None:
    root = Path(__file__).resolve().parents[2] / package
    expected = {f"statekit/{package}/{p.relative_to(root).as_posix()}" for p in root.rglob("*.py")
                if "__pycache__" not in p.parts}
    with zipfile.ZipFile(build_package_zip(str(tmp_path))) as archive:
        assert expected <= set(archive.namelist())
