"""Shared fixtures: a local S3-compatible server (moto, 127.0.0.1) and fresh buckets; statekit's
native RocksDB snapshots (an incremental checkpoint, a native savepoint) of one job's state."""

from __future__ import annotations

import functools
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def private_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The process's temporary directory (``tempfile.gettempdir()``), private to the test."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture(scope="session")
def s3_server() -> Iterator[dict[str, Any]]:
    """A moto S3 server on 127.0.0.1 for the whole run.

    Yields ``{"endpoint_url": ..., "storage_options": {...}}``; storage_options go to fsspec
    (s3fs). Credentials and region are set through the environment, as clients expect.
    """
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        yield {
            "endpoint_url": endpoint,
            "storage_options": {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}},
        }
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3_bucket(s3_server: dict[str, Any]) -> str:
    """A new empty bucket; returns its URL ``s3://<name>``."""
    import s3fs

    name = f"statekit-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(**s3_server["storage_options"])
    fs.mkdir(name)
    s3fs.S3FileSystem.clear_instance_cache()
    return f"s3://{name}"


# ----------------------------------------------------------------------------- native snapshots

_ROOT = Path(__file__).resolve().parents[1]
_WORDS = [f"word{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(8)]


@dataclass(frozen=True)
class NativeSnapshots:
    """statekit's native RocksDB snapshots of one state, and its canonical savepoint (the truth).

    Attributes:
        checkpoint: An incremental checkpoint ``<job>/chk-N`` (SST files in ``<job>/shared/``).
        savepoint: A native savepoint of the same state: every store file private to it.
        canonical: The canonical savepoint of the same state.
        inputs: The job's input folder (examples/wordcount.py reads it).
    """

    checkpoint: Path
    savepoint: Path
    canonical: Path
    inputs: Path


def _launch(*args: str) -> None:
    import os
    import subprocess
    import sys
    import tempfile

    command = [sys.executable, "-m", "statekit.cli.main", "run", "-p", "2", "--executor", "threads",
               "--state-backend", "rocksdb", *args]
    with tempfile.TemporaryDirectory(prefix="statekit-home-") as home:
        done = subprocess.run(command, cwd=_ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "STATEKIT_HOME": home})
    assert done.returncode == 0, done.stderr[-2000:]


def native_savepoint_of(checkpoint: Path, target: Path) -> Path:
    """A native savepoint of ``checkpoint``'s state: its files copied, the shared ones into the
    store's private directory, and a ``_metadata`` naming them there (kind savepoint)."""
    import shutil
    from dataclasses import replace

    from statekit.readers.snapshot import open_snapshot
    from statekit.statefmt.metadata import SnapshotKind, serialize_metadata
    from statekit.statefmt.native_state import native_private_dir

    snapshot = open_snapshot(str(checkpoint))
    md = snapshot.metadata
    operators = []
    for op in md.operators:
        subtasks = []
        for st in op.subtasks:
            for relative in [f.path for f in st.files] + ([st.channel_state.path] if st.channel_state else []):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(snapshot.file_path(relative), target / relative)
            if st.native is None:
                subtasks.append(st)
                continue
            files = []
            for file in st.native.files:
                relative = f"{native_private_dir(op.uid, st.index, op.parallelism)}/{file.name}"
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(snapshot.file_path(file.path), target / relative)
                files.append(replace(file, path=relative))
            subtasks.append(replace(st, native=replace(st.native, files=tuple(files))))
        operators.append(replace(op, subtasks=tuple(subtasks)))
    (target / "_metadata").write_bytes(serialize_metadata(replace(md, kind=SnapshotKind.SAVEPOINT,
                                                                  operators=tuple(operators))))
    return target


@pytest.fixture(scope="session")
def native_snapshots(tmp_path_factory: pytest.TempPathFactory) -> NativeSnapshots:
    """An incremental RocksDB checkpoint of examples/wordcount.py (p = 2), a native savepoint and
    the canonical savepoint of its state (the job restored from it, with no input left to read).
    Never modified: copy before damaging."""
    pytest.importorskip("rocksdict")
    base = tmp_path_factory.mktemp("native-snapshots")
    inputs = base / "in"
    inputs.mkdir()
    for f in range(3):
        lines = (" ".join(_WORDS[(f * 7 + i * j) % len(_WORDS)] for j in range(12)) for i in range(2000))
        (inputs / f"t{f}.txt").write_text("\n".join(lines), encoding="utf-8")
    wordcount = str(_ROOT / "examples" / "wordcount.py")
    _launch("--checkpoint-dir", str(base / "chk"), "--checkpoint-interval", "50ms", "--incremental",
            "--externalized-cleanup", "retain", wordcount, "--input", str(inputs), "--output", str(base / "out1"))
    (job_dir,) = (base / "chk").iterdir()
    checkpoint = max(job_dir.glob("chk-*"), key=lambda p: int(p.name[4:]))
    _launch("-s", str(checkpoint), "--savepoint-on-finish", str(base / "sp"), wordcount,
            "--input", str(inputs), "--output", str(base / "out2"))
    (canonical,) = (base / "sp").iterdir()
    savepoint = native_savepoint_of(checkpoint, base / "native" / "savepoint-000000-native")
    return NativeSnapshots(checkpoint, savepoint, canonical, inputs)


# ---------------------------------------------------------------- the fast subset

# A test is slow when it starts a JVM (Spark), a server (PostgreSQL, moto's S3), or job processes
# it kills and restarts; `scripts/test.sh -m "not slow"` runs the rest in a few minutes.
SLOW_FIXTURES = frozenset({"spark", "spark_cluster", "connect_server", "postgres_server", "postgres_dsn",
                           "s3_server", "native_snapshots"})
SLOW_DIRECTORIES = ("spark/", "runtime/taskmanager/", "runtime/e2e/")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests (see SLOW_FIXTURES and SLOW_DIRECTORIES) ``slow``."""
    for item in items:
        try:
            where = item.path.resolve().relative_to(TESTS).as_posix()
        except ValueError:
            continue
        if where.startswith(SLOW_DIRECTORIES) or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
# ------------------------------------------------------------------ the JSON contract


@functools.cache
def _command_validator(command: str) -> Any:
    """A jsonschema validator of ``command``'s ``--json`` document (docs/json/, built in memory)."""
    import jsonschema

    from statekit.cli.render import command_results
    from statekit.statefmt.json_contract import json_schema

    schema = json_schema(*command_results(command))
    return jsonschema.Draft202012Validator(schema)


def json_contract_errors(command: str, document: Any) -> list[str]:
    """Why ``document`` is not a valid ``--json`` document of ``command`` (empty: it is)."""
    from statekit.cli.render import COMMAND_RESULTS

    if command not in COMMAND_RESULTS:
        return [f"{command!r} prints --json but has no entry in statekit.cli.render.COMMAND_RESULTS"]
    return [f"{command} --json at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in _command_validator(command).iter_errors(document)]


@pytest.fixture(autouse=True)
def json_documents_follow_their_schema(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ``--json`` document a command prints in this process validates against the schema
    of its command (the test fails at teardown otherwise): the schemas in docs/json/ are checked
    against the real output of every CLI test."""
    import json

    import click

    from statekit.cli.output import JsonOutput

    failures: list[str] = []
    show = JsonOutput.show

    def checked_show(self: JsonOutput, result: Any) -> None:
        from statekit.statefmt.json_contract import json_document

        ctx = click.get_current_context(silent=True)
        if ctx is None:  # shown outside a command: no schema to check against
            show(self, result)
            return
        words = []
        node: click.Context | None = ctx
        while node is not None and node.parent is not None:
            words.append(node.info_name or "")
            node = node.parent
        document = json.loads(json.dumps(json_document(result)))
        failures.extend(json_contract_errors(" ".join(reversed(words)), document))
        show(self, result)

    monkeypatch.setattr(JsonOutput, "show", checked_show)
    yield
    assert not failures, "\n".join(failures[:10])


@pytest.fixture(autouse=True)
def _statekit_environment() -> Iterator[None]:
    """Each test ends with the ``STATEKIT_*`` variables it started with: a command run in-process
    writes ``$STATEKIT_STORAGE_OPTIONS`` (it carries storage options to the processes it starts),
    which would reach the processes of later tests."""
    saved = {key: value for key, value in os.environ.items() if key.startswith("STATEKIT_")}
    yield
    for key in [key for key in os.environ if key.startswith("STATEKIT_") and key not in saved]:
        del os.environ[key]
    os.environ.update(saved)
