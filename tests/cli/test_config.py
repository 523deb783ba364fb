"""The config file: profiles, the order flags > env > profile > default, ``statekit config
show`` with each value's source, and bad files as one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from statekit.cli import config as config_module
from statekit.cli.main import cli
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

CONFIG = """\
default_profile = "minio"

[profiles.minio]
savepoint_dir = "/data/savepoints"
storage_options = { anon = false, client_kwargs = { endpoint_url = "http://127.0.0.1:9000" } }
spark = { remote = "sc://spark.example:15002", conf = { "spark.sql.shuffle.partitions" = 64 } }
output = { plain = true }

[profiles.laptop]
spark.master = "local[4]"
output = "json"
"""
ENV_KEYS = ("STATEKIT_PROFILE", "STATEKIT_SPARK_MASTER", "STATEKIT_SPARK_REMOTE", "STATEKIT_SAVEPOINT_DIR",
            "STATEKIT_OUTPUT", "STATEKIT_STORAGE_OPTIONS", "COLUMNS")


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("STATEKIT_CONFIG", str(path))
    config_module._load.cache_clear()
    return path


def invoke(*args: str, **env: str) -> Result:
    config_module._load.cache_clear()
    return CliRunner(env=env).invoke(cli, list(args))


def show(*args: str, **env: str) -> dict[str, Any]:
    result = invoke(*args, "config", "show", "--json", **env)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def settings(data: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    return {s["key"]: (s["value"], s["source"]) for s in data["settings"]}


def test_the_default_profile_applies_and_show_names_each_source(clean: Path) -> None:
    data = show()
    assert (data["config_file"], data["exists"], data["profile"]) == (str(clean), True, "minio")
    assert data["profile_source"] == f"default_profile of {clean}" and data["profiles"] == ["laptop", "minio"]
    found = settings(data)
    assert found["spark.remote"] == ("sc://spark.example:15002", "profile")
    assert found["spark.conf"] == ({"spark.sql.shuffle.partitions": "64"}, "profile")
    assert found["savepoint_dir"] == ("/data/savepoints", "profile")
    assert found["output"] == ("plain", "profile")
    assert found["spark.master"] == (None, "default")
    assert found["storage_options.client_kwargs"] == ({"endpoint_url": "http://127.0.0.1:9000"}, "profile")


def test_env_beats_the_profile_and_flags_beat_env() -> None:
    found = settings(show(STATEKIT_SAVEPOINT_DIR="/env/sp", STATEKIT_OUTPUT="json",
                          STATEKIT_STORAGE_OPTIONS='{"anon": true}'))
    assert found["savepoint_dir"] == ("/env/sp", "env")
    assert found["output"] == ("json", "env")
    assert found["storage_options.anon"] == (True, "env")
    assert found["storage_options.client_kwargs"][1] == "profile"  # merged key by key
    # --profile beats STATEKIT_PROFILE, which beats default_profile
    assert show(STATEKIT_PROFILE="laptop")["profile"] == "laptop"
    assert show("--profile", "minio", STATEKIT_PROFILE="laptop")["profile"] == "minio"


def test_the_profile_reaches_the_commands(tmp_path: Path) -> None:
    from statekit.cli.config import resolve
    from statekit.cli.spark_commands import spark_settings

    sp = tmp_path / "sp"
    SavepointWriter.new_savepoint(8).with_operator(
        "c", {StateDescriptor("n", StateKind.VALUE, value_type="int"): [("a", 1)]}).write(str(sp))
    # output = {plain = true}: no borders, even where a terminal would get them
    plain = invoke("inspect", str(sp), TTY_COMPATIBLE="1", NO_COLOR="1", COLUMNS="200")
    assert plain.exit_code == 0 and "┃" not in plain.stdout
    bordered = invoke("inspect", str(sp), TTY_COMPATIBLE="1", NO_COLOR="1", COLUMNS="200", STATEKIT_OUTPUT="rich")
    assert "┃" in bordered.stdout
    # output = "json" in the laptop profile: results and errors are JSON
    result = invoke("--profile", "laptop", "inspect", str(tmp_path / "missing"))
    assert result.exit_code == 2 and json.loads(result.stderr)["error"]["exit_code"] == 2
    config_module._load.cache_clear()
    with CliRunner().isolation(env={"STATEKIT_PROFILE": "laptop"}):
        import click

        with click.Context(cli).scope():
            settings_ = spark_settings(None, ("spark.executor.cores=2",), False)
            assert (settings_.master, settings_.remote, dict(settings_.conf)) == (
                "local[4]", None, {"spark.executor.cores": "2"})
            assert spark_settings("local[1]", (), False).master == "local[1]"  # the flag wins
            assert resolve("savepoint_dir").value is None


@pytest.mark.parametrize("text, message", [
    ("profiles = 3\n", "profiles must be a table"),
    ("[profiles.x]\nspark_master = 'local'\n", "[profiles.x]: unknown key 'spark_master'"),
    ("[profiles.x]\nspark = { masterr = 'x' }\n", "[profiles.x]: spark takes master, remote and conf"),
    ("[profiles.x]\noutput = 'fancy'\n", "[profiles.x]: output must be one of json, plain, rich"),
    ("[profiles.x\n", "not valid TOML"),
    ("colour = 1\n", "unknown key 'colour'"),
])
def test_a_bad_config_file_is_one_line_exit_2_naming_it(clean: Path, tmp_path: Path, text: str, message: str) -> None:
    clean.write_text(text)
    result = invoke("inspect", str(tmp_path), "--storage-option", "anon=true")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"statekit: error: {clean}: ") and message in line, line


def test_a_profile_that_is_not_in_the_file_is_bad_input(clean: Path) -> None:
    result = invoke("--profile", "nope", "config", "show")
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"statekit: error: {clean}: profile 'nope' (--profile) is not in the config "
                                     "file (profiles: laptop, minio)")


def test_no_config_file_means_nothing_configured(tmp_path: Path) -> None:
    data = show(STATEKIT_CONFIG=str(tmp_path / "none.toml"))
    assert (data["exists"], data["profile"], data["profile_source"]) == (False, None, "no config file")
    assert all(s["source"] == "default" for s in data["settings"])


def test_shell_completion_is_served(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "_STATEKIT_COMPLETE": "bash_complete", "COMP_WORDS": "statekit exp", "COMP_CWORD": "1"}
    script = "from statekit.cli.main import main; main()"
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert "plain,export" in result.stdout.splitlines(), result.stdout
    env["_STATEKIT_COMPLETE"] = "bash_source"
    source = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert "_statekit_completion" in source.stdout
