"""``bootstrap --ttl-ms``: real per-entry expiries (reference time + TTL) that the runtime honours."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.api.state import ListStateDescriptor, StateDescriptorBase
from statekit.runtime.api.ttl import ManualClock, StateTtlConfig
from statekit.runtime.checkpoint.restore import RestorePlan, SubtaskRestore
from statekit.runtime.state.backend import SubtaskScope
from statekit.runtime.state.registry import create_keyed_backend, state_backend, state_backend_names
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.writers.bootstrap import bootstrap_savepoint
from statekit.writers.bootstrap_spec import BootstrapSpec

REF = 1_700_000_000_000
TTL = 60_000


def _input(tmp_path: Path) -> str:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"k": ["a", "b", "a"], "u": ["x", "y", "z"], "v": [1, 2, 3]}), path)
    return str(path)


def _spec(tmp_path: Path, kind: str, **fields: Any) -> BootstrapSpec:
    extra = {"user_key_column": "u"} if kind == "map" else {}
    return BootstrapSpec(inputs=[_input(tmp_path)], output=str(tmp_path / kind), uid="op", state="s", kind=kind,
                         key_column="k", value_columns=["v"], **extra, **fields)


def _entries(path: str) -> list[tuple[Any, ...]]:
    out = []
    for e in SavepointReader.read(path).read_keyed_state("op", "s"):
        out.append((e.key, e.user_key, e.value, e.expiry) if hasattr(e, "user_key") else (e.key, e.value, e.expiry))
    return sorted(out)


def test_every_entry_expires_at_reference_time_plus_ttl(tmp_path: Path) -> None:
    expiry = REF + TTL
    bootstrap_savepoint(_spec(tmp_path, "value", ttl_ms=TTL, ttl_reference_time_ms=REF))
    assert _entries(str(tmp_path / "value")) == [("a", 3, expiry), ("b", 2, expiry)]
    bootstrap_savepoint(_spec(tmp_path, "list", ttl_ms=TTL, ttl_reference_time_ms=REF))
    assert _entries(str(tmp_path / "list")) == [("a", [1, 3], expiry), ("b", [2], expiry)]
    bootstrap_savepoint(_spec(tmp_path, "map", ttl_ms=TTL, ttl_reference_time_ms=REF))
    assert _entries(str(tmp_path / "map")) == [("a", "x", 1, expiry), ("a", "z", 3, expiry), ("b", "y", 2, expiry)]
    assert SavepointReader.read(str(tmp_path / "map")).descriptor("op", "s").ttl_ms == TTL


def test_without_ttl_entries_never_expire(tmp_path: Path) -> None:
    bootstrap_savepoint(_spec(tmp_path, "value"))
    assert _entries(str(tmp_path / "value")) == [("a", 3, None), ("b", 2, None)]


def test_the_reference_time_defaults_to_now(tmp_path: Path) -> None:
    before = time.time_ns() // 1_000_000
    spec = _spec(tmp_path, "value", ttl_ms=TTL)
    after = time.time_ns() // 1_000_000
    assert spec.ttl_reference_time_ms is not None and before <= spec.ttl_reference_time_ms <= after
    bootstrap_savepoint(spec)
    assert {e[2] for e in _entries(spec.output)} == {spec.ttl_reference_time_ms + TTL}


@pytest.mark.parametrize("fields, message", [
    ({"ttl_reference_time_ms": REF}, "--ttl-reference-time is only meaningful with --ttl-ms"),
    ({"ttl_ms": TTL, "ttl_reference_time_ms": -1}, "--ttl-reference-time -1: expected epoch milliseconds >= 0"),
    ({"ttl_ms": 2 ** 63}, "--ttl-ms 9223372036854775808: entries would expire after the latest time an expiry holds"),
    ({"ttl_ms": 2 ** 63 - 1 - REF, "ttl_reference_time_ms": REF}, "entries would expire after the latest time"),
])
def test_bad_ttl_options_are_refused(tmp_path: Path, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        _spec(tmp_path, "value", **fields)


def test_the_latest_expiry_is_accepted(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "value", ttl_ms=2 ** 63 - 2 - REF, ttl_reference_time_ms=REF)
    bootstrap_savepoint(spec)
    assert {e[2] for e in _entries(spec.output)} == {2 ** 63 - 2}


def test_operator_state_gets_no_ttl(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="a TTL applies to keyed state only, not union state"):
        BootstrapSpec(inputs=[_input(tmp_path)], output=str(tmp_path / "u"), uid="op", state="s", kind="union",
                      value_columns=["v"], ttl_ms=TTL)


@pytest.mark.parametrize("backend", [
    pytest.param(name, marks=pytest.mark.skipif(not state_backend(name).available, reason="not installed"))
    for name in state_backend_names()])
def test_the_runtime_expires_bootstrapped_entries(tmp_path: Path, backend: str) -> None:
    bootstrap_savepoint(_spec(tmp_path, "list", ttl_ms=TTL, ttl_reference_time_ms=REF, max_parallelism=128))
    plan = RestorePlan.open(str(tmp_path / "list"))
    restored = plan.subtask("op", 0, 1, 128)
    assert isinstance(restored, SubtaskRestore)
    clock = ManualClock(REF + TTL - 1)
    target = create_keyed_backend(backend, SubtaskScope("op", 0, 1, 128, "msgpack",
                                                        compute_key_group_range_for_operator_index(128, 1, 0)))
    target.ttl_clock = clock
    for descriptor, entries in restored.keyed_states():
        target.restore_state(descriptor, entries)
    descriptor: StateDescriptorBase = ListStateDescriptor("s")
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(TTL).build())
    state = target.get_state(descriptor)
    target.current_key = "a"
    assert state.get() == [1, 3]  # type: ignore[attr-defined]
    clock.advance(1)
    assert state.get() == []  # type: ignore[attr-defined]
    target.close()


def test_cli_sets_expiries_and_refuses_a_reference_time_alone(tmp_path: Path) -> None:
    base = ["bootstrap", "--input", _input(tmp_path), "--uid", "op", "--state", "s", "--key-column", "k",
            "--value-column", "v"]
    result = CliRunner().invoke(cli, [*base, "--ttl-ms", str(TTL), "--ttl-reference-time", str(REF),
                                      "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert _entries(str(tmp_path / "out")) == [("a", 3, REF + TTL), ("b", 2, REF + TTL)]
    bad = CliRunner().invoke(cli, [*base, "--ttl-reference-time", str(REF), "-o", str(tmp_path / "bad")])
    assert bad.exit_code == 2
    assert "--ttl-reference-time is only meaningful with --ttl-ms" in bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "bad").exists()

