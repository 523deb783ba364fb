"""Progress reporting seam between long-running work and whoever displays progress.

The one definition for every layer: a diff, a writer or a Spark job receives a
:data:`ProgressFactory` — the shape of ``Output.progress`` in ``statekit.cli.output`` — and
opens a bar once it knows the total amount of work::

    with (progress or no_progress)("rescaling", total=work_bytes) as advance:
        advance(file_name, bytes_done)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

__all__ = ["Advance", "ProgressFactory", "no_progress"]

Advance = Callable[[str, int], None]
ProgressFactory = Callable[..., AbstractContextManager[Advance]]


@contextmanager
def no_progress(description: str, total: int | None = None, unit: str = "bytes") -> Iterator[Advance]:
    """A progress factory that shows nothing."""
    yield lambda _name, _amount: None
