"""--storage-option KEY=VALUE and STATEKIT_STORAGE_OPTIONS: fsspec options for object stores,
tested against moto with the options given only on the command line (no credentials in the
environment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.storage_options import STORAGE_OPTIONS_ENV, StorageOptions, storage_options_for
from statekit.writers.savepoint_writer import SavepointWriter

AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_SESSION_TOKEN")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No options nor credentials from the environment; the CLI's own write-back is undone."""
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, "")  # blank: no options; restored (unset) after the test


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


# ---------------------------------------------------------------- the spec


def test_pairs_nest_dotted_keys_and_decode_json_values() -> None:
    options = StorageOptions.parse(["anon=true", "client_kwargs.endpoint_url=http://127.0.0.1:9000",
                                    "client_kwargs.region_name=eu-west-1", "default_block_size=5242880",
                                    'key="007"', "secret=a=b"])
    assert options.options == {
        "anon": True, "default_block_size": 5242880, "key": "007", "secret": "a=b",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
    }


@pytest.mark.parametrize("pair", ["anon", "=1", "client_kwargs.=x", ".x=1"])
def test_a_malformed_pair_is_bad_input(pair: str) -> None:
    with pytest.raises(BadInputError, match="invalid storage option"):
        StorageOptions.parse([pair])


def test_the_command_line_wins_over_the_environment_key_by_key() -> None:
    env = {STORAGE_OPTIONS_ENV: json.dumps({"anon": False, "client_kwargs": {"region_name": "us-east-1"}})}
    merged = StorageOptions.from_env(env).merged(StorageOptions.parse(["client_kwargs.endpoint_url=http://h:1"]))
    assert merged.options == {"anon": False, "client_kwargs": {"region_name": "us-east-1", "endpoint_url": "http://h:1"}}


@pytest.mark.parametrize("text", ["not json", "[1, 2]"])
def test_a_bad_environment_variable_is_bad_input(text: str) -> None:
    with pytest.raises(BadInputError, match=STORAGE_OPTIONS_ENV):
        StorageOptions.from_env({STORAGE_OPTIONS_ENV: text})


def test_local_paths_never_get_object_store_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, '{"anon": true}')
    assert storage_options_for("/tmp/x", None) == {}
    assert storage_options_for("file:///tmp/x", None) == {}
    assert storage_options_for("memory://x", {"a": 1}) == {"a": 1}
    assert storage_options_for("s3://b/x", {"key": "k"}) == {"anon": True, "key": "k"}


def test_a_local_path_works_with_object_store_options(tmp_path: Path) -> None:
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    SavepointWriter.new_savepoint(max_parallelism=4).with_operator("op", {count: [("a", 1)]}).write(str(tmp_path / "sp"))
    result = run("verify", str(tmp_path / "sp"), "--storage-option", "anon=true")
    assert result.exit_code == 0, result.output


def test_a_malformed_option_on_the_command_line_is_exit_2(tmp_path: Path) -> None:
    result = run("inspect", str(tmp_path), "--storage-option", "anon")
    assert result.exit_code == 2 and "invalid storage option 'anon'" in result.stderr
    assert "Traceback" not in result.output


# ---------------------------------------------------------------- S3 (moto), options on the command line only


@pytest.fixture
def s3_savepoint(s3_server: dict[str, Any], s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> str:
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    url = f"{s3_bucket}/savepoints/savepoint-1"
    SavepointWriter.new_savepoint(max_parallelism=8).with_operator(
        "counter", {count: [(f"k{i}", i) for i in range(50)]}, parallelism=2).write(
        url, storage_options=s3_server["storage_options"])
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    return url


def cli_options(s3_server: dict[str, Any]) -> list[str]:
    return ["--storage-option", "key=testing", "--storage-option", "secret=testing",
            "--storage-option", f"client_kwargs.endpoint_url={s3_server['endpoint_url']}",
            "--storage-option", "client_kwargs.region_name=us-east-1"]


def test_inspect_verify_and_list_on_s3_with_options_on_the_command_line(
        s3_server: dict[str, Any], s3_savepoint: str) -> None:
    options = cli_options(s3_server)
    inspected = run("--json", "inspect", s3_savepoint, *options)
    assert inspected.exit_code == 0, inspected.output
    assert json.loads(inspected.stdout)["entries"] == 50
    verified = run("verify", s3_savepoint, *options)
    assert verified.exit_code == 0, verified.output
    assert verified.stdout.startswith(f"OK {s3_savepoint}")
    listed = run("--json", "checkpoints", "list", s3_savepoint.rsplit("/", 1)[0], *options)
    assert listed.exit_code == 0, listed.output
    assert "savepoint-1" in listed.stdout


def test_rescale_from_s3_to_s3_with_options_on_the_command_line(
        s3_server: dict[str, Any], s3_savepoint: str) -> None:
    out = s3_savepoint.rsplit("/", 1)[0] + "/rescaled"
    result = run("rescale", s3_savepoint, "-p", "3", "-o", out, *cli_options(s3_server))
    assert result.exit_code == 0, result.output
    inspected = run("--json", "inspect", out, *cli_options(s3_server))
    data = json.loads(inspected.stdout)
    assert data["entries"] == 50 and data["operators"][0]["parallelism"] == 3


def test_the_environment_variable_alone_opens_s3(s3_server: dict[str, Any], s3_savepoint: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, json.dumps(
        {"key": "testing", "secret": "testing",
         "client_kwargs": {"endpoint_url": s3_server["endpoint_url"], "region_name": "us-east-1"}}))
    result = run("verify", s3_savepoint)
    assert result.exit_code == 0, result.output


def test_an_unreachable_endpoint_on_the_command_line_is_exit_2(s3_server: dict[str, Any], s3_savepoint: str) -> None:
    # an endpoint nothing listens on: exit 2 naming the object store (proves the options reach s3fs)
    result = run("verify", s3_savepoint, "--storage-option", "key=testing", "--storage-option", "secret=testing",
                 "--storage-option", "client_kwargs.endpoint_url=http://127.0.0.1:9",
                 "--storage-option", "client_kwargs.region_name=us-east-1",
                 "--storage-option", 'config_kwargs={"connect_timeout": 1, "retries": {"max_attempts": 1}}')
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("statekit: error: object store: EndpointConnectionError: ")


# savepoint targets: the job's own options; a job id, or no argument at all; config and spark take no path
NO_PATH = {"keygroup", "list", "savepoint", "stop", "cancel", "checkpoint", "checkpoints history", "ui", "config",
           "spark"}


def test_every_command_that_takes_a_path_has_the_option() -> None:
    import click

    from statekit.cli.main import COMMANDS

    root = click.Context(cli, info_name="statekit")
    missing = []
    for name in sorted(set(COMMANDS) - NO_PATH):
        command = cli.get_command(root, name)
        assert command is not None
        commands = list(command.commands.values()) if isinstance(command, click.Group) else [command]
        missing += [f"{name} {c.name}" for c in commands if f"{name} {c.name}" not in NO_PATH
                    and not any("--storage-option" in p.opts for p in c.params)]
    assert missing == []
