"""What the tests that run real Flink jobs share: whether they were asked for, and PyFlink's Python.

They run under ``pytest -m flink`` (scripts/test_flink.sh) or with ``STATEKIT_FLINK_TESTS=1``, and
skip, saying why, when PyFlink or Java is missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def flink_tests_selected(config: pytest.Config) -> bool:
    """Whether this run asked for the tests that run real Flink."""
    expression = str(config.getoption("-m") or "")
    return os.environ.get("STATEKIT_FLINK_TESTS") == "1" or ("flink" in expression and "not flink" not in expression)


def pyflink_venv_python() -> Path:
    """The Python of the PyFlink virtualenv (``STATEKIT_PYFLINK_PYTHON``, else .venv-flink)."""
    return Path(os.environ.get("STATEKIT_PYFLINK_PYTHON", ROOT / ".venv-flink" / "bin" / "python"))


def pyflink_python(config: pytest.Config, what: str, *, javac: bool = False) -> Path:
    """PyFlink's Python for tests that run ``what`` in real Flink; skips unless they were asked for
    and PyFlink and Java 17 (with ``javac``, the compiler too) are there."""
    if not flink_tests_selected(config):
        pytest.skip(f"{what}: run `pytest -m flink` or scripts/test_flink.sh")
    python = pyflink_venv_python()
    if not python.exists():
        pytest.skip(f"PyFlink is not installed ({python} missing): scripts/test_flink.sh installs it "
                    "(scripts/install_pyflink.sh) and runs these tests")
    if shutil.which("java") is None or (javac and shutil.which("javac") is None):
        pytest.skip("Java 17 (java" + (", javac" if javac else "") + ") is not on the PATH: PyFlink runs a JVM")
    return python
