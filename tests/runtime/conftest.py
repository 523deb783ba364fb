"""Fixtures of the runtime tests: a real PostgreSQL server and a fresh database per test.

The tests live in one directory per room of ``runtime/`` (``api/`` ... ``control/``) plus
``e2e/`` for whole jobs checked end to end; the helpers (``postgres_server``, ``chaos``,
``sink_contexts``, ``jobs_for_checkpoints``, ``toy_backend``, ``jobs/``) sit beside this file
and are imported by name (this directory goes on ``sys.path``). The server is started once per run, as the ``postgres``
system user when the tests run as root; the tests skip only when the PostgreSQL binaries
are missing (``.ci/run`` installs the Debian package ``postgresql``).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from postgres_server import MISSING_BINARIES, PostgresServer, find_postgres_bin  # noqa: E402 (needs the sys.path entry)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server (127.0.0.1, a free port, max_prepared_transactions = 64) for the run."""
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip(MISSING_BINARIES)
    server = PostgresServer(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The DSN of a new, empty database on the shared server (started again if a test stopped it)."""
    postgres_server.start()
    return postgres_server.create_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture(autouse=True)
def _close_rocksdb_backends(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every RocksDB backend a test created and left open (tests that build backends by
    hand): its database directory lives in the system temp directory and goes with ``close``."""
    from statekit.runtime.state.backend_rocksdb import RocksDBKeyedStateBackend

    created: list[RocksDBKeyedStateBackend] = []
    original = RocksDBKeyedStateBackend.__init__

    def tracked(self: RocksDBKeyedStateBackend, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        created.append(self)

    monkeypatch.setattr(RocksDBKeyedStateBackend, "__init__", tracked)
    yield
    for backend in created:
        backend.close()
