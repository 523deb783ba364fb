"""NumPy, where installed: the optional engine of some column-wise fast paths.

statekit does not depend on NumPy. Each fast path that uses it has a pyarrow-only path
giving exactly the same result (tests compare the two); :func:`numpy_or_none` is the one
place that decides which runs, so a test can force the pyarrow-only path.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = ["integer_view", "numpy_or_none", "pooled_empty"]

_UNSET = object()
_numpy: object = _UNSET


def numpy_or_none() -> ModuleType | None:
    """The ``numpy`` module, or None when it cannot be imported (imported once)."""
    global _numpy
    if _numpy is _UNSET:
        try:
            import numpy
        except ImportError:
            _numpy = None
        else:
            _numpy = numpy
    return _numpy if isinstance(_numpy, ModuleType) else None


def pooled_empty(np: ModuleType, n: int, dtype: Any) -> Any:
    """An uninitialized NumPy array of ``n`` ``dtype`` items in memory of Arrow's pool.

    Arrow's allocator keeps freed memory for the next allocation, where the C library
    returns large blocks to the system at once: a fresh block of the same size then costs
    a page fault per 4 KiB page on first touch (about a tenth of a second per snapshot of
    a million entries). The temporaries of the fast paths come from the pool for that."""
    import pyarrow as pa

    kind = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(max(n, 1) * kind.itemsize), kind, n)


def integer_view(np: ModuleType, array: Any) -> Any:
    """A read-only NumPy view of an Arrow integer array without nulls, sharing its buffer.

    Not ``Array.to_numpy``: pyarrow's conversion to NumPy initializes its pandas support,
    which imports pandas where it is installed (0.3-0.5 s, see statefmt.pandas_probe)."""
    import pyarrow as pa

    if not pa.types.is_integer(array.type) or array.null_count:
        raise ValueError(f"an integer array without nulls is needed, not {array.type} with {array.null_count} nulls")
    kind = np.dtype(str(array.type))
    return np.frombuffer(array.buffers()[1], kind, len(array), array.offset * kind.itemsize)
