"""``statekit.flink`` exports its names lazily: each resolves, and the CLI's seam stays light."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import statekit.flink as flink


@pytest.mark.parametrize("name", sorted(flink.__all__))
def test_every_exported_name_resolves_to_its_module_attribute(name: str) -> None:
    module = importlib.import_module(flink._MODULE_OF[name])
    assert getattr(flink, name) is getattr(module, name)


def test_exports_and_lazy_table_name_the_same_things() -> None:
    assert sorted(flink.__all__) == sorted(flink._MODULE_OF)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        flink.no_such_name  # noqa: B018


def test_the_cli_seam_does_not_load_the_flink_reader_until_a_flink_snapshot_is_seen() -> None:
    """Every CLI command imports ``flink.dispatch``; the reader (entries, RocksDB, serializers)
    costs ~0.2 s of start-up and is needed only for Flink snapshots."""
    probe = (
        "import sys, statekit.flink.dispatch\n"
        "heavy = sorted(m for m in sys.modules if m in ('statekit.flink.entries', 'statekit.flink.rocksdb',"
        " 'statekit.flink.serializers', 'statekit.flink.snapshot'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
