"""pyarrow's pandas probe, answered without importing pandas.

The first ``pa.array(...)`` of a process asks pyarrow's pandas shim whether the input is a
pandas object, and the shim imports pandas to find out: 0.3-0.5 s on this project's
machines (apache/arrow#34994), paid by every CLI command and by a job's first checkpoint
when pandas is installed, although statekit never hands pyarrow a pandas object.

:func:`answer_pandas_probe` lets the shim's one-time probe fail as if pandas were absent,
so later ``pa.array`` calls treat lists as sequences without importing it. Only the probe
is answered: every explicit pandas use of pyarrow (``to_pandas``, ``from_pandas``, Spark's
conversions) still imports pandas, because the shim retries the import for those.

Invariants:
- a process that has imported pandas before is left alone (its objects may reach pyarrow);
- nothing is left behind: the finder that hides pandas is removed after the probe;
- pandas imported later (by a user function, by Spark) is announced to pyarrow right after
  its import, so pandas objects convert exactly as they would have without the probe;
- installing twice is harmless; the hook waits for pyarrow's own import, so a command that
  never touches Arrow does not pay for importing it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["answer_pandas_probe", "answer_pandas_probe_on_import"]


def answer_pandas_probe() -> None:
    """Settle pyarrow's pandas probe now (imports pyarrow) unless pandas is already loaded."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    blocker = _PandasAbsent()
    sys.meta_path.insert(0, blocker)
    try:
        # the shim's first probes, answered "no pandas": pyarrow 26 asks on the first
        # conversion of an untyped sequence, older versions on any first pa.array
        pa.array([])
        pa.array([], pa.null())
    finally:
        sys.meta_path.remove(blocker)


def answer_pandas_probe_on_import() -> None:
    """Answer the probe as soon as pyarrow is first imported (at once if it already is), and
    tell pyarrow about pandas the moment pandas is imported after all."""
    if not any(isinstance(finder, _ImportWatch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ImportWatch())
    if "pyarrow" in sys.modules:
        answer_pandas_probe()


def _pandas_arrived() -> None:
    """pandas has just been imported: pyarrow's shim must see it from now on (a pandas
    Categorical must convert to a dictionary array, not to strings)."""
    pyarrow_lib = sys.modules.get("pyarrow.lib")
    if pyarrow_lib is not None:
        pyarrow_lib._pandas_api.pd  # noqa: B018 - an explicit use re-imports (now: finds) pandas


_AFTER: dict[str, Callable[[], None]] = {"pyarrow": answer_pandas_probe, "pandas": _pandas_arrived}


class _PandasAbsent(importlib.abc.MetaPathFinder):
    """``import pandas`` fails as if it were not installed (while the probe runs)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


class _ImportWatch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for ``pyarrow`` and ``pandas`` it wraps the loader the other
    finders give, so that the ``_AFTER`` step runs right after the package has executed."""

    def __init__(self) -> None:
        self._looking = threading.local()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        after = _AFTER.get(fullname)
        if after is None or getattr(self._looking, "name", None) == fullname:
            return None
        self._looking.name = fullname
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking.name = None
        if spec is not None and isinstance(spec.loader, importlib.abc.Loader):
            spec.loader = _RunAfterExec(spec.loader, after)
        return spec


class _RunAfterExec(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, after: Callable[[], None]) -> None:
        self._loader = loader
        self._after = after

    def __getattr__(self, name: str) -> Any:  # resource readers, get_code, ...: the wrapped loader's
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._after()
