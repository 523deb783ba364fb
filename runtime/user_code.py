"""Where the user's code is in a traceback: the innermost frame that is neither statekit's
nor Python's or an installed package's (``file:line, in function``).

A failing task's one-line log, a failed job's message and a job script that does not import
end with it, so a user reads which line of their own code failed without ``--verbose``.
Frames count as the user's when their file lies outside statekit's packages, outside the
standard library and outside ``site-packages``; when none does (the failure is inside a
library the user called), the innermost frame outside statekit stands in.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from functools import lru_cache

__all__ = ["user_frame", "user_location", "with_user_location", "compile_job_script", "run_job_script"]


@lru_cache(maxsize=1)
def _not_users() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(statekit's package folders, the interpreter's library folders), as real paths with a
    trailing separator."""
    import statekit.statefmt as anchor

    statekit_root = os.path.dirname(os.path.dirname(os.path.realpath(anchor.__file__)))
    ours = {os.path.join(statekit_root, name) for name in
            ("statefmt", "readers", "writers", "flink", "runtime", "spark", "cli")}
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith("statekit.") and name.count(".") == 1:
            for folder in getattr(module, "__path__", []) or []:
                ours.add(os.path.realpath(folder))
    libraries = {sysconfig.get_paths().get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    libraries |= {os.path.realpath(path) for path in sys.path if path.endswith(("site-packages", "dist-packages"))}
    return (tuple(os.path.join(p, "") for p in ours if p),
            tuple(os.path.join(os.path.realpath(p), "") for p in libraries if p))


def _is_statekit(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_not_users()[0])


def _is_library(filename: str) -> bool:
    return filename.startswith("<") or os.path.realpath(filename).startswith(_not_users()[1])


def user_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the user's code in ``error``'s traceback (see the module docstring)."""
    frames = traceback.extract_tb(error.__traceback__)
    outside = [f for f in frames if not _is_statekit(f.filename)]
    users = [f for f in outside if not _is_library(f.filename)]
    if users:
        return users[-1]
    return outside[-1] if outside else None


def user_location(error: BaseException) -> str | None:
    """``file:line, in function`` of :func:`user_frame`, or ``None``."""
    frame = user_frame(error)
    if frame is None:
        return None
    return f"{frame.filename}:{frame.lineno}, in {frame.name}"


def with_user_location(text: str, error: BaseException) -> str:
    """``text (at file:line, in function)`` when the user's code is in ``error``'s traceback."""
    where = user_location(error)
    return text if where is None else f"{text} (at {where})"


def compile_job_script(path: str) -> None:
    """Compile the job script at ``path`` (nothing runs).

    Raises:
        JobScriptError: It does not compile: ``file:line: SyntaxError: message``.
        OSError: It cannot be read.
    """
    from statekit.statefmt.errors import JobScriptError

    with open(path, "rb") as f:
        source = f.read()
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as error:  # IndentationError, TabError too
        raise JobScriptError(f"{type(error).__name__}: {error.msg}", path=error.filename or path,
                             line=error.lineno) from None
    except ValueError as error:  # NUL bytes
        raise JobScriptError(f"the job script does not compile: {error}", path=path) from None


def run_job_script(path: str) -> None:
    """Run the job script at ``path`` as ``__main__`` (``runpy``, as ``python JOB.py`` would).

    Raises:
        JobScriptError: It does not compile (``file:line: SyntaxError: ...``) or an import in it
            fails (``file:line: ModuleNotFoundError: ...``, the line of the user's code that
            imported): bad input, exit 2.
        BaseException: Whatever else the script raises, unchanged.
    """
    import runpy

    from statekit.statefmt.errors import JobScriptError

    compile_job_script(path)
    try:
        runpy.run_path(path, run_name="__main__")
    except ImportError as error:
        frame = user_frame(error)
        raise JobScriptError(f"{type(error).__name__}: {error}", path=frame.filename if frame else path,
                             line=frame.lineno if frame else None) from error
