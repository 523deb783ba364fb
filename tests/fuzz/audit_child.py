"""Child-process entry of the fuzz suite: resource limits, an audit hook, then ``statekit``.

    python -I -B audit_child.py AUDIT_LOG AS_BYTES FSIZE_BYTES -- ARGS...
    python -I -B audit_child.py AUDIT_LOG AS_BYTES FSIZE_BYTES --python CODE   (harness self-tests)

Limits are set here rather than in a ``preexec_fn`` because the suite starts children from
two threads, and ``preexec_fn`` is not safe in a threaded parent; the effect is the same:
they apply before statekit is imported.

At exit the peak resident set size is logged (``"op": "peak"``, KiB). The hook logs one JSON object per line for every audited filesystem, process, network and
unpickling event: ``{"event", "op", "raw", "real"}``. ``real`` is resolved at the moment of
the event (the file may be gone afterwards): the full ``realpath`` for what is read or
written through (``open``, ``os.listdir``, ``os.scandir``), the resolved parent plus the
entry's own name for what acts on the entry itself (remove, rmdir, rename, symlink, ...).
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sys
import threading
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# event -> (operation, its path arguments as (index, how to resolve, index of the dir_fd argument))
# how: "follow" resolves symlinks all the way (what is read or written through), "entry" only
# the parent (what acts on the directory entry itself).
_Arg = tuple[int, str, "int | None"]
_PATH_EVENTS: dict[str, tuple[str, tuple[_Arg, ...]]] = {
    "os.listdir": ("list", ((0, "follow", None),)),
    "os.scandir": ("list", ((0, "follow", None),)),
    "os.remove": ("delete", ((0, "entry", 1),)),
    "os.rmdir": ("delete", ((0, "entry", 1),)),
    "shutil.rmtree": ("delete", ((0, "entry", 1),)),
    "os.rename": ("rename", ((0, "entry", 2), (1, "entry", 3))),
    "shutil.move": ("rename", ((0, "entry", None), (1, "entry", None))),
    "os.symlink": ("write", ((1, "entry", 2),)),  # argument 0 is the link's text, not a path acted on
    "os.link": ("link", ((0, "follow", 2), (1, "entry", 3))),
    "os.mkdir": ("write", ((0, "entry", 2),)),
    "os.chmod": ("write", ((0, "follow", 2),)),
    "os.chown": ("write", ((0, "follow", 3),)),
    "os.utime": ("write", ((0, "follow", 3),)),
    "os.truncate": ("write", ((0, "follow", None),)),
    "shutil.copyfile": ("copy", ((0, "follow", None), (1, "entry", None))),
    "shutil.copytree": ("copy", ((0, "follow", None), (1, "entry", None))),
}
_OTHER_EVENTS = {
    "subprocess.Popen": "exec", "os.system": "exec", "os.exec": "exec", "os.posix_spawn": "exec",
    "os.spawn": "exec", "os.fork": "exec", "os.forkpty": "exec",
    "socket.connect": "net", "socket.bind": "net", "socket.getaddrinfo": "net",
    "pickle.find_class": "unpickle",
}


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _resolve(arg: Any, how: str, dir_fd: Any = None) -> tuple[str | None, str | None]:
    """(raw path, resolved path) of a path argument; (None, None) when there is none."""
    if arg is None:
        return None, None
    if isinstance(arg, int):  # a descriptor: listdir(fd), scandir(fd), truncate(fd)
        try:
            return f"fd {arg}", os.path.realpath(_fd_path(arg))
        except OSError:
            return f"fd {arg}", None
    try:
        raw = os.fsdecode(os.fspath(arg))
    except TypeError:
        return repr(arg), None
    if isinstance(dir_fd, int) and not os.path.isabs(raw):
        raw = os.path.join(_fd_path(dir_fd), raw)
    if how == "follow":
        return raw, os.path.realpath(raw)
    parent, name = os.path.split(os.path.abspath(raw))
    return raw, os.path.join(os.path.realpath(parent), name)


def _open_dir_fd() -> int | None:
    """The directory descriptor of an ``os.open(name, dir_fd=...)`` by shutil.rmtree's walk.

    The "open" audit event does not carry ``dir_fd``; rmtree's fd-based walk keeps it in the
    local ``topfd`` of the calling frame, statekit's :func:`~statekit.writers.removal.unlink_beneath`
    in ``fd``. Any other relative open is relative to the cwd.
    """
    frame = sys._getframe(3)  # _open_dir_fd <- _record <- hook <- the caller of os.open
    if frame.f_globals.get("__name__") == "shutil" and isinstance(frame.f_locals.get("topfd"), int):
        return int(frame.f_locals["topfd"])
    # statekit's no-follow deletion walks down a directory descriptor it keeps in ``fd``
    if frame.f_globals.get("__name__") == "statekit.writers.removal" and isinstance(frame.f_locals.get("fd"), int):
        return int(frame.f_locals["fd"])
    return None


class _AuditLog:
    def __init__(self, path: str) -> None:
        self.file = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        self.local = threading.local()

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "open" and event not in _PATH_EVENTS and event not in _OTHER_EVENTS:
            return
        if getattr(self.local, "busy", False):
            return
        self.local.busy = True
        try:
            self._record(event, args)
        except Exception as exc:  # noqa: BLE001 - never change the audited program's behaviour
            self._write(event, "hook-error", [(f"{type(exc).__name__}: {exc}"[:300], None)])
        finally:
            self.local.busy = False

    def _record(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if isinstance(path, int):
                return  # open(fd): the descriptor was opened (and logged) by os.open
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
            self._write(event, "write" if writes else "read", [_resolve(path, "follow", _open_dir_fd())])
        elif event in _PATH_EVENTS:
            op, spec = _PATH_EVENTS[event]

            def arg(i: int | None) -> Any:
                return args[i] if i is not None and i < len(args) else None

            self._write(event, op, [_resolve(arg(i), how, arg(fd)) for i, how, fd in spec])
        else:
            self._write(event, _OTHER_EVENTS[event], [(repr(args)[:300], None)])

    def peak(self) -> None:
        """Log the peak resident set size of this process image (VmHWM; ru_maxrss counts the parent's)."""
        with open("/proc/self/status", encoding="ascii") as status:
            kib = next((line.split()[1] for line in status if line.startswith("VmHWM:")), "0")
        self._write("exit", "peak", [(kib, None)])

    def _write(self, event: str, op: str, paths: list[tuple[str | None, str | None]]) -> None:
        paths = [p for p in paths if p[0] is not None]
        self.file.write(json.dumps({"event": event, "op": op, "raw": [p[0] for p in paths],
                                    "real": [p[1] for p in paths]}) + "\n")


def main() -> None:
    log_path, address_space, file_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mode, rest = sys.argv[4], sys.argv[5:]
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    audit = _AuditLog(log_path)
    atexit.register(audit.peak)  # before the hook: reading /proc/self/status is the harness's own
    sys.addaudithook(audit.hook)
    if mode == "--python":
        exec(compile(rest[0], "<fuzz self-test>", "exec"), {"__name__": "__main__"})
        return
    assert mode == "--", f"expected -- or --python, got {mode!r}"
    sys.argv = ["statekit", *rest]
    from statekit.cli.main import main as statekit_main

    statekit_main()


if __name__ == "__main__":
    main()
