"""One spelling of sizes: binary units, ``B`` without decimals, one decimal above."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekit.statefmt.units import UNITS, human_bytes


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (1024 ** 2 * 5, "5.0 MiB"),
    (1024 ** 3 * 2, "2.0 GiB"), (1024 ** 5, "1024.0 TiB"), (None, "-"), (-2048, "-2.0 KiB"), (0.5, "0 B"),
])
def test_human_bytes(n: int | float | None, text: str) -> None:
    assert human_bytes(n) == text


@given(st.integers(min_value=0, max_value=1 << 60))
def test_every_size_has_one_unit_and_reads_back_within_a_rounding(n: int) -> None:
    value, unit = human_bytes(n).split()
    assert unit in UNITS
    scale = 1024 ** UNITS.index(unit)
    assert abs(float(value) * scale - n) <= 0.05 * scale + 0.5


def test_the_cli_and_the_report_use_it() -> None:
    from statekit.cli.renderers import markup
    from statekit.writers import report

    assert markup.human_bytes is human_bytes and report.human_bytes is human_bytes
