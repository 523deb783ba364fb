"""The one place that maps errors to exit codes and one-line messages.

Exit codes: 0 success; 1 a failed check (verify found damage, diff found differences,
a job failed); 2 bad input (missing or malformed paths, bad options, damaged sources) or
an environment failure (disk full, permission denied: any OSError);
3 internal error (a bug: please report it with --verbose output); 130 interrupted.

Text mode prints on stderr one line per reason: ``statekit: error: PATH: cause``. With ``--json``
the same failure is one JSON object on one line of stderr (stdout stays empty, so a redirected
result file is never half an answer)::

    {"schema_version": 1, "error": {"message": "PATH: cause", "path": "PATH", "exit_code": 2,
                                    "type": "MetadataError"}}

``path`` is ``null`` when the failure names no path; several reasons are separated by newlines
inside ``message``; the exit code is the same in both modes. Usage errors (unknown option,
missing argument) follow the same rule. The document follows the JSON contract of every
``--json`` output (``docs/json/error.schema.json``, generated from :class:`ErrorDocument`).
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from statekit.statefmt.errors import EXIT_BAD_INPUT, IncompatibleStateError, StatekitError
from statekit.statefmt.json_contract import json_document

__all__ = ["BadInputUsage", "catch_exception", "exit_now", "error_json", "json_mode", "report_usage_error", "EXIT_INTERNAL", "EXIT_INTERRUPTED"]

EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130
F = TypeVar("F", bound=Callable[..., Any])


def _verbose() -> bool:
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if isinstance(ctx.obj, dict) and ctx.obj.get("verbose"):
            return True
        if ctx.params.get("verbose"):
            return True
        ctx = ctx.parent
    return False


def json_mode(ctx: click.Context | None = None) -> bool:
    """Whether ``--json`` was given, before the command or after it, or the output style is
    ``json`` ($STATEKIT_OUTPUT or the profile's; a config file that does not load counts as not)."""
    node = ctx if ctx is not None else click.get_current_context(silent=True)
    while node is not None:
        if (isinstance(node.obj, dict) and node.obj.get("json")) or node.params.get("as_json"):
            return True
        node = node.parent
    from statekit.cli.config import output_style

    try:
        return output_style() == "json"
    except StatekitError:
        return False


@dataclass(frozen=True)
class ErrorInfo:
    """A failure: the text mode's message, the path it names, the exit code and the error class."""

    message: str
    path: str | None
    exit_code: int
    type: str


@dataclass(frozen=True)
class ErrorDocument:
    """The ``--json`` form of a failure, one line on stderr."""

    error: ErrorInfo


def error_json(message: str, code: int, path: str | None, kind: str) -> str:
    """The ``--json`` form of a failure: one line, ``{"schema_version", "error": {message, path,
    exit_code, type}}``."""
    return json.dumps(json_document(ErrorDocument(ErrorInfo(message, path, code, kind))))


def _fail(message: str, code: int, path: str | None = None, kind: str = "Error", *, reasons: bool = False,
          now: bool = False) -> None:
    """Print the failure and exit; with ``reasons`` each line of ``message`` is one reason
    (IncompatibleStateError lists several), else the message is folded into one line; ``now``:
    :func:`exit_now`."""
    if _verbose():
        traceback.print_exc(file=sys.stderr)
    parts = message.splitlines() if reasons else [message]
    lines = [" ".join(line.split()) for line in parts or [""]]
    if json_mode():
        click.echo(error_json("\n".join(lines), code, path, kind), err=True)
    else:
        for one_line in lines:
            click.echo(f"statekit: error: {one_line}", err=True)
    if now:
        exit_now(code)
    sys.exit(code)


def exit_now(code: int) -> None:
    """Exit at once (after Ctrl-C): the exit hooks run (temporary files go) and the streams are
    flushed, but the interpreter's teardown of pyarrow, pyspark and their objects — seconds on a
    busy machine — is skipped. Under a test runner's captured streams, an ordinary exit."""
    if sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__:
        sys.exit(code)
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class BadInputUsage(click.ClickException):
    """Bad input found while the arguments are parsed (a broken config file read by an option's
    callback): exit 2, the one-line form of every other failure."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, error: StatekitError) -> None:
        super().__init__(" ".join(str(error).split()))

    def show(self, file: Any = None) -> None:
        click.echo(f"statekit: error: {self.format_message()}", err=True)


def report_usage_error(error: click.ClickException) -> None:
    """Print a usage error as JSON (``--json``) and exit with its code (2)."""
    click.echo(error_json(" ".join(error.format_message().split()), error.exit_code, None, type(error).__name__),
               err=True)
    sys.exit(error.exit_code)


def _os_error_line(exc: OSError) -> str:
    cause = exc.strerror or str(exc) or type(exc).__name__
    return f"{exc.filename}: {cause}" if exc.filename else cause


# clients of object stores whose failures are the environment's (unreachable endpoint, no or
# wrong credentials, access denied), not statekit bugs: exit 2 like any OSError
_OBJECT_STORE_MODULES = ("botocore.", "aiobotocore.", "s3fs.", "gcsfs.", "google.auth.", "google.api_core.",
                         "adlfs.", "azure.")


def _is_object_store_error(exc: BaseException) -> bool:
    return any(type(exc).__module__.startswith(prefix) for prefix in _OBJECT_STORE_MODULES)


def catch_exception(func: F) -> F:
    """Turn every exception of a command into its exit code and a one-line message."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except click.ClickException as exc:
            if not json_mode():
                raise
            report_usage_error(exc)
        except (click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except StatekitError as exc:
            # only an incompatible restore lists several reasons, a line each; any other message
            # (whose paths may hold newlines) is folded into one line
            _fail(str(exc), exc.exit_code, exc.path, type(exc).__name__,
                  reasons=isinstance(exc, IncompatibleStateError))
        except KeyboardInterrupt:
            _fail("interrupted", EXIT_INTERRUPTED, kind="KeyboardInterrupt", now=True)
        except BrokenPipeError:
            sys.exit(0)
        except OSError as exc:  # the environment, not statekit: disk full, permissions, name too long
            _fail(_os_error_line(exc), EXIT_BAD_INPUT, None if exc.filename is None else str(exc.filename),
                  type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            if _is_object_store_error(exc):
                _fail(f"object store: {type(exc).__name__}: {exc} (check the endpoint, credentials and region: "
                      "--storage-option or $STATEKIT_STORAGE_OPTIONS)", EXIT_BAD_INPUT, kind=type(exc).__name__)
            _fail(
                f"internal error: {type(exc).__name__}: {exc} (a bug in statekit; rerun with --verbose for the traceback)",
                EXIT_INTERNAL, kind="InternalError",
            )

    return wrapper  # type: ignore[return-value]
