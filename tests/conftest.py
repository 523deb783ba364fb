"""Shared fixtures: a local S3-compatible server (moto, 127.0.0.1) and fresh buckets."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
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
