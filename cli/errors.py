"""The one place that maps errors to exit codes and one-line messages.

Exit codes: 0 success; 1 a failed check (verify found damage, diff found differences,
a job failed); 2 bad input (missing or malformed paths, bad options, damaged sources) or
an environment failure (disk full, permission denied: any OSError);
3 internal error (a bug: please report it with --verbose output); 130 interrupted.
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click

from statekit.statefmt.errors import EXIT_BAD_INPUT, StatekitError

__all__ = ["catch_exception", "EXIT_INTERNAL", "EXIT_INTERRUPTED"]

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


def _fail(message: str, code: int) -> None:
    if _verbose():
        traceback.print_exc(file=sys.stderr)
    one_line = " ".join(message.split())
    click.echo(f"statekit: error: {one_line}", err=True)
    sys.exit(code)


def _os_error_line(exc: OSError) -> str:
    cause = exc.strerror or str(exc) or type(exc).__name__
    return f"{exc.filename}: {cause}" if exc.filename else cause


def catch_exception(func: F) -> F:
    """Turn every exception of a command into its exit code and a one-line message."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except StatekitError as exc:
            _fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", EXIT_INTERRUPTED)
        except BrokenPipeError:
            sys.exit(0)
        except OSError as exc:  # the environment, not statekit: disk full, permissions, name too long
            _fail(_os_error_line(exc), EXIT_BAD_INPUT)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            _fail(
                f"internal error: {type(exc).__name__}: {exc} (a bug in statekit; rerun with --verbose for the traceback)",
                EXIT_INTERNAL,
            )

    return wrapper  # type: ignore[return-value]
