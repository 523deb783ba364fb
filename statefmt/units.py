"""How statekit writes sizes for people: one function, binary units everywhere.

``human_bytes`` is the only spelling of a byte count in text output (tables, messages, the
HTML report, progress bars use rich's ``binary_units``): ``B`` below 1 KiB (no decimals),
then ``KiB``, ``MiB``, ``GiB``, ``TiB`` with one decimal — ``512 B``, ``1.5 KiB``, ``2.0 GiB``.
JSON output carries plain byte counts.
"""

from __future__ import annotations

__all__ = ["human_bytes", "UNITS"]

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: int | float | None) -> str:
    """``n`` bytes in binary units (``-`` for ``None``); negative counts keep their sign."""
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    for unit in UNITS:
        if value < 1024 or unit == UNITS[-1]:
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
