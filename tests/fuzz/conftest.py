"""Fixtures of the fuzz suite: the valid base snapshot and its metadata body.

The suite's helper modules (``fuzz_harness``, ``fuzz_cases``) sit beside this file and are
imported by name (this directory goes on ``sys.path``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from fuzz_cases import SNAPSHOT_NAME, read_body, write_base_snapshot  # noqa: E402 (needs the sys.path entry)


@pytest.fixture(scope="session")
def base_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid statekit savepoint written with the writer API (never modified)."""
    path = tmp_path_factory.mktemp("fuzz-base") / SNAPSHOT_NAME
    write_base_snapshot(path)
    return path


@pytest.fixture(scope="session")
def base_body(base_snapshot: Path) -> Any:
    """The JSON body of the base snapshot's ``_metadata``."""
    return read_body(base_snapshot)
