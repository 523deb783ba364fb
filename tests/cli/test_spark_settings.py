"""Where a command's Spark runs: flags, then the environment, then the profile, then the
server of ``statekit spark start`` when it runs and serves this interpreter, else ``local[*]``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import pytest

from statekit.cli import config as config_module
from statekit.cli.main import cli
from statekit.cli.spark_commands import spark_settings
from statekit.spark import connect_server
from statekit.spark.connect_server import ServerInfo, running_server
from statekit.spark.session import SparkSettings

SERVER = ServerInfo(os.getpid(), 15999, "local[2]", sys.executable, "4.x", 0, "/dev/null")


@pytest.fixture(autouse=True)
def no_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("STATEKIT_SPARK_MASTER", "STATEKIT_SPARK_REMOTE", "STATEKIT_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("STATEKIT_CONFIG", str(tmp_path / "none.toml"))
    config_module._load.cache_clear()
    config_module.use_profile(None)


def settings(master: str | None = None, remote: str | None = None) -> SparkSettings:
    with click.Context(cli).scope():
        return spark_settings(master, (), False, remote)


def test_a_running_server_is_used_when_nothing_else_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect_server, "running_server", lambda: SERVER)
    chosen = settings()
    assert (chosen.remote, chosen.managed) == ("sc://127.0.0.1:15999", True)
    assert (settings("local[1]").master, settings("local[1]").remote) == ("local[1]", None)
    assert settings(remote="sc://other:15002").managed is False
    monkeypatch.setenv("STATEKIT_SPARK_MASTER", "spark://cluster:7077")
    assert (settings().master, settings().remote) == ("spark://cluster:7077", None)


def test_without_a_server_it_is_embedded_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect_server, "running_server", lambda: None)
    assert (settings().master, settings().remote, settings().managed) == ("local[*]", None, False)


def test_a_state_file_counts_only_for_a_live_server_of_this_interpreter(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {"STATEKIT_RUNTIME_DIR": str(runtime)}
    assert running_server(env) is None  # no file
    state = {**SERVER.__dict__}
    (runtime / "spark-connect.json").write_text(json.dumps(state))
    assert running_server(env) is None  # this process is not a Connect server (a reused pid)
    (runtime / "spark-connect.json").write_text(json.dumps({**state, "python": "/usr/bin/other-python"}))
    assert running_server(env) is None
    (runtime / "spark-connect.json").write_text("{not json")
    assert running_server(env) is None
