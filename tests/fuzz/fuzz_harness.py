"""Run one statekit command on a (mutated) snapshot in a limited, audited child process and
check everything a hostile snapshot must not be able to do.

A *run* happens in its own directory (:class:`RunDirs`)::

    <run>/parent/<snapshot>/      the snapshot under test (a fresh copy per run)
    <run>/parent/canary/          a canary beside it: a copy of the valid snapshot and a secret
    <run>/parent/shared/          the job's shared/ directory (what ``format: native`` may name)
    <run>/outside/                symlink targets outside the snapshot: valid copies, a secret
    <run>/other/<snapshot-2>/     the valid "B" side of ``diff``
    <run>/out/                    the output directory's parent (OUT = out/result)
    <run>/tmp/ home/ cwd/         TMPDIR, HOME and working directory of the child

Checks of every run (:func:`check_run`):

* no hang (``TIMEOUT_S``, then the child's process group is killed); memory bounded: the
  child runs under ``RLIMIT_AS`` (``ADDRESS_SPACE``) and its peak RSS stays under
  ``PEAK_RSS_MIB``; no file beyond ``RLIMIT_FSIZE`` (``FILE_SIZE``) is attempted;
* exit code in {0, 1, 2};
* stderr: nothing on exit 0, exactly one ``statekit: error: ...`` line (one JSON error object with ``--json``) on exit 2, at most
  that one line on exit 1; no ``Traceback`` anywhere; ``--json`` output parses on exit 0;
* the audit log of the child (``audit_child.py``, paths resolved through symlinks at the
  moment of each event): reads and listings only inside the snapshot, the job's
  ``shared/`` and what else the command is given (:class:`Command`), the Python
  installation (venv and base prefixes), statekit's package directories, ``/proc``,
  ``/sys``, ``/dev/null``, ``/usr/share/zoneinfo`` and the user's config file
  (``HOME/.config/statekit/config.toml``, read only); writes only in the command's output directory and TMPDIR;
  deletes only inside the snapshot (``dispose``) and of what the command itself created;
  no process start, network use or unpickling (Python-level events only: C code such as
  pyarrow's own file IO is not audited, which the tree comparison below backs up);
* the snapshot (unless disposed), the canary, ``shared/``, ``outside/`` and ``other/``
  byte-for-byte unchanged (:func:`tree_state`); a failed ``dispose`` deletes nothing, a
  successful one leaves no snapshot directory;
* outputs appear whole or not at all: on failure ``out/`` is empty, on success it holds
  exactly ``result/`` with a ``_metadata``; TMPDIR, HOME and the working directory end empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHILD = HERE / "audit_child.py"
_VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(_VENV_PYTHON if _VENV_PYTHON.exists() else Path(sys.executable))

TIMEOUT_S = float(os.environ.get("STATEKIT_FUZZ_TIMEOUT", "20"))
ADDRESS_SPACE = 1536 << 20  # RLIMIT_AS of the child: 1.5 GiB
PEAK_RSS_MIB = 512  # more than this for a snapshot of a few KiB is unbounded memory use
FILE_SIZE = 256 << 20  # RLIMIT_FSIZE: no runaway output file
WORKERS = 2  # children at once (the CI machine has 2 cores)
SHOWN = 1500  # characters of stdout / stderr quoted in a failure

_ERROR_LINE = re.compile(r"statekit: error: \S.*")
# Read-only kernel and device files any Python process may touch.
# /usr/share/zoneinfo: time-zone data pyarrow reads for timestamp columns in UTC
_SYSTEM_READ = ("/proc", "/sys", "/dev/null", "/usr/share/zoneinfo")


# ----------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class RunDirs:
    """The directories of one run (see the module docstring)."""

    root: Path
    snapshot_name: str

    @property
    def parent(self) -> Path:
        return self.root / "parent"

    @property
    def snap(self) -> Path:
        return self.parent / self.snapshot_name

    @property
    def canary(self) -> Path:
        return self.parent / "canary"

    @property
    def shared(self) -> Path:
        return self.parent / "shared"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    @property
    def other(self) -> Path:
        return self.root / "other" / "savepoint-ababab-000000000002"

    @property
    def outdir(self) -> Path:
        return self.root / "out"

    @property
    def out(self) -> Path:
        return self.outdir / "result"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    def make_scratch(self) -> None:
        for d in (self.outdir, self.tmp, self.home, self.cwd):
            d.mkdir(parents=True, exist_ok=True)

    def role(self, name: str) -> Path:
        """A directory by role name, as the command table names them."""
        return {"snap": self.snap, "parent": self.parent, "shared": self.shared, "other": self.other,
                "outdir": self.outdir, "tmp": self.tmp}[name]


# ----------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class Command:
    """An offline command and what it may touch.

    Attributes:
        name: Short id used in test ids and messages.
        args: The statekit arguments for a run's directories.
        reads: Roles it may read (besides what it may write or delete).
        lists: Roles whose directory itself (not what is below) it may list.
        writes: Roles it may create files and directories in.
        deletes: Roles it may delete in.
        produces_output: Writes OUT (``out/result``), whole or not at all.
        disposes: Deletes the snapshot when it succeeds.
        json: Prints JSON on stdout.
    """

    name: str
    args: Callable[[RunDirs], list[str]]
    reads: tuple[str, ...] = ("snap", "shared")
    lists: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    deletes: tuple[str, ...] = ()
    produces_output: bool = False
    disposes: bool = False
    json: bool = False


def _p(path: Path) -> str:
    return str(path)


STATEKIT_COMMANDS: tuple[Command, ...] = (
    Command("inspect", lambda d: ["inspect", _p(d.snap)]),
    Command("inspect-json", lambda d: ["--json", "inspect", _p(d.snap)], json=True),
    Command("verify", lambda d: ["verify", _p(d.snap)]),
    Command("checkpoints-list", lambda d: ["checkpoints", "list", _p(d.parent)], reads=("parent",)),
    Command("dispose-dry-run", lambda d: ["dispose", "--dry-run", _p(d.snap)]),
    Command("dispose", lambda d: ["dispose", _p(d.snap)], deletes=("snap",), disposes=True),
    Command("rescale-p3", lambda d: ["rescale", _p(d.snap), "-p", "3", "-o", _p(d.out)],
            writes=("outdir", "tmp"), produces_output=True),
    Command("rescale-maxp16", lambda d: ["rescale", _p(d.snap), "--max-parallelism", "16", "-o", _p(d.out)],
            writes=("outdir", "tmp"), produces_output=True),
    Command("modify-remove-op", lambda d: ["modify", _p(d.snap), "--remove-operator", "source", "-o", _p(d.out)],
            writes=("outdir", "tmp"), produces_output=True),
    Command("diff", lambda d: ["diff", _p(d.snap), _p(d.other), "--engine", "local"],
            reads=("snap", "shared", "other"), writes=("tmp",)),
)

FLINK_COMMANDS: tuple[Command, ...] = (
    Command("inspect", lambda d: ["inspect", _p(d.snap)]),
    Command("inspect-json", lambda d: ["--json", "inspect", _p(d.snap)], json=True),
    # verify opens RocksDB stores in scratch space under TMPDIR (which must end empty)
    Command("verify", lambda d: ["verify", _p(d.snap)], writes=("tmp",)),
    Command("checkpoints-list", lambda d: ["checkpoints", "list", _p(d.parent)], reads=("parent",)),
    # a Flink checkpoint's dispose looks for sibling chk-N that may still use shared files
    Command("dispose-dry-run", lambda d: ["dispose", "--dry-run", _p(d.snap)], lists=("parent",)),
)


def command_named(commands: Sequence[Command], name: str) -> Command:
    return next(c for c in commands if c.name == name)


# ----------------------------------------------------------------------------- the child


@dataclass(frozen=True)
class SystemRoots:
    """What any run may read besides its own directories: Python, statekit's code, the kernel."""

    read: tuple[str, ...]
    import_tokens: frozenset[str]  # sys.path entries that are not directories (import hooks)


@lru_cache(maxsize=1)
def system_roots() -> SystemRoots:
    """Asked from the child's own interpreter, started the same way (-I -B)."""
    code = (
        "import sys, os, json, importlib.util, sysconfig\n"
        "import tomllib, pathlib\n"
        "root = pathlib.Path(importlib.util.find_spec('statekit.cli').submodule_search_locations[0]).parent\n"
        "names = tomllib.loads((root / 'pyproject.toml').read_text())['tool']['setuptools']['packages']\n"
        "pkgs = [p for n in names for p in (importlib.util.find_spec(n).submodule_search_locations or [])]\n"
        "prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]\n"
        "prefixes += [v for k, v in sysconfig.get_paths().items() if k in ('stdlib', 'platstdlib', 'purelib', 'platlib')]\n"
        "print(json.dumps({'prefixes': prefixes, 'packages': pkgs, 'path': sys.path}))\n"
    )
    done = subprocess.run([PYTHON, "-I", "-B", "-c", code], capture_output=True, text=True, check=True, timeout=60)
    info = json.loads(done.stdout)
    roots = {os.path.realpath(p) for p in info["prefixes"] + info["packages"]}
    tokens = frozenset(p for p in info["path"] if p and not os.path.isabs(p))
    return SystemRoots(read=tuple(sorted(roots)) + _SYSTEM_READ, import_tokens=tokens)


@dataclass
class RunResult:
    """What one child did."""

    argv: list[str]
    returncode: int | None  # None: killed after the time limit
    stdout: str
    stderr: str
    elapsed_s: float
    peak_rss_mib: float | None  # None: the child died before reporting it
    events: list[dict[str, Any]]

    @property
    def hung(self) -> bool:
        return self.returncode is None


def run_child(dirs: RunDirs, args: list[str], *, python_code: str | None = None,
              timeout_s: float = TIMEOUT_S) -> RunResult:
    """Run ``statekit ARGS`` (or, for self-tests, PYTHON_CODE) audited and limited; never raises on failure."""
    dirs.make_scratch()
    log = dirs.root / "audit.log"
    tail = ["--python", python_code] if python_code is not None else ["--", *args]
    argv = [PYTHON, "-I", "-B", str(CHILD), str(log), str(ADDRESS_SPACE), str(FILE_SIZE), *tail]
    # MALLOC_ARENA_MAX: RLIMIT_AS counts address space reserved, not used; glibc reserves 64 MiB
    # per malloc arena (up to 8 per core), and the threads of pyarrow and RocksDB would take
    # arenas reserving more than the limit, so a thread fails to start (RocksDB then aborts)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(dirs.home), "TMPDIR": str(dirs.tmp),
           "TMP": str(dirs.tmp), "TEMP": str(dirs.tmp), "LC_ALL": "C.UTF-8", "COLUMNS": "200",
           "MALLOC_ARENA_MAX": "2"}
    out_path, err_path = dirs.root / "stdout", dirs.root / "stderr"
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=dirs.cwd, env=env,
                                start_new_session=True)
    status, hung = _wait(proc, started + timeout_s)
    elapsed = time.monotonic() - started
    events = _read_events(log)
    peaks = [int(e["raw"][0]) / 1024 for e in events if e["op"] == "peak"]
    return RunResult(
        argv=argv, returncode=None if hung else os.waitstatus_to_exitcode(status),
        stdout=out_path.read_text(errors="replace"), stderr=err_path.read_text(errors="replace"),
        elapsed_s=elapsed, peak_rss_mib=peaks[-1] if peaks else None,
        events=[e for e in events if e["op"] != "peak"],
    )


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> tuple[int, bool]:
    """Wait for the child (by its pid); kill its process group at the deadline. (status, hung)"""
    while True:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return status, False
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: only what we started
            _, status = os.waitpid(proc.pid, 0)
            proc.returncode = -signal.SIGKILL
            return status, True
        time.sleep(0.01)


def _read_events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    events = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"event": "?", "op": "unparsable", "raw": [line[:200]], "real": [None]})
    return events


# ----------------------------------------------------------------------------- trees


def tree_state(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry below ``root`` (not following symlinks): type, mode, times, size, content digest."""
    if not os.path.lexists(root):
        return {}
    state = {".": _entry(root)}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            state[path.relative_to(root).as_posix()] = _entry(path)
    return state


def _entry(path: Path) -> tuple[Any, ...]:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    if stat.S_ISREG(st.st_mode):
        return ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_size, _digest(path, st.st_size))
    return ("special", stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_mtime_ns)


def _digest(path: Path, size: int) -> str:
    """sha256 of the content; of the first and last MiB for large (sparse) files."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= 64 << 20:
            h.update(f.read())
        else:
            h.update(f.read(1 << 20))
            f.seek(size - (1 << 20))
            h.update(f.read())
    return h.hexdigest()


def tree_changes(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]],
                 *, skip: str | None = None) -> list[str]:
    """Entries added, removed or changed; ``skip`` leaves out one subtree (a relative path)."""
    def kept(rel: str) -> bool:
        return skip is None or not (rel == skip or rel.startswith(skip + "/"))

    changes = []
    for rel in sorted(set(before) | set(after)):
        if not kept(rel) or before.get(rel) == after.get(rel):
            continue
        if rel == "." and skip is not None and before.get(rel, ("",))[0] == "dir":
            continue  # the parent's mtime changes when its child snapshot is disposed
        what = "added" if rel not in before else "removed" if rel not in after else "changed"
        changes.append(f"{rel} {what}")
    return changes


# ----------------------------------------------------------------------------- checks


@dataclass
class Guarded:
    """Tree states taken before a run, compared after it."""

    trees: dict[str, dict[str, tuple[Any, ...]]] = field(default_factory=dict)

    @classmethod
    def take(cls, dirs: RunDirs) -> Guarded:
        return cls({name: tree_state(path) for name, path in _guarded_paths(dirs).items()})


def _guarded_paths(dirs: RunDirs) -> dict[str, Path]:
    return {"parent": dirs.parent, "outside": dirs.outside, "other": dirs.other.parent}


def check_run(dirs: RunDirs, command: Command, result: RunResult, guarded: Guarded,
              system: SystemRoots) -> list[str]:
    """Every broken invariant of one run, as one line each (empty: the run is fine)."""
    if result.hung:
        return [f"hang: no exit within {TIMEOUT_S:.0f} s (killed)"]
    problems = _check_exit(command, result)
    if result.peak_rss_mib is not None and result.peak_rss_mib > PEAK_RSS_MIB:
        problems.append(f"peak RSS {result.peak_rss_mib:.0f} MiB (more than {PEAK_RSS_MIB} MiB)")
    problems += audit_problems(result.events, _policy(dirs, command), system)
    problems += _check_trees(dirs, command, result, guarded)
    problems += _check_scratch(dirs, command, result)
    return problems


def _error_form(json_output: bool) -> str:
    return "JSON error object" if json_output else "'statekit: error: ...'"


def _is_error_line(line: str, json_output: bool, rc: int) -> bool:
    """One error line: ``statekit: error: ...``, or with --json one object naming the exit code."""
    if not json_output:
        return _ERROR_LINE.fullmatch(line) is not None
    try:
        error = json.loads(line)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (isinstance(error, dict) and error.get("exit_code") == rc and isinstance(error.get("message"), str)
            and "\n" not in error["message"])


def _check_exit(command: Command, result: RunResult) -> list[str]:
    rc, lines = result.returncode, result.stderr.splitlines()
    problems = []
    if rc not in (0, 1, 2):
        problems.append(f"exit code {rc} (expected 0, 1 or 2)")
    if "Traceback" in result.stderr or "Traceback" in result.stdout:
        problems.append("a traceback was printed")
    if "File too large" in result.stderr:
        problems.append(f"tried to write a file larger than {FILE_SIZE >> 20} MiB (RLIMIT_FSIZE) from a small snapshot")
    if rc == 0 and result.stderr.strip():
        problems.append("exit 0 but stderr is not empty")
    if rc == 2 and (len(lines) != 1 or not _is_error_line(lines[0], command.json, rc)):
        problems.append(f"exit 2 but stderr is not exactly one {_error_form(command.json)} line ({len(lines)} lines)")
    if rc not in (0, 2) and lines and (len(lines) != 1 or not _is_error_line(lines[0], command.json, rc)):
        problems.append(f"stderr is not one {_error_form(command.json)} line ({len(lines)} lines)")
    if rc == 0 and command.json:
        try:
            json.loads(result.stdout)
        except ValueError as exc:
            problems.append(f"--json output is not JSON: {exc}")
    return problems


@dataclass(frozen=True)
class Policy:
    read: tuple[str, ...]
    write: tuple[str, ...]
    delete: tuple[str, ...]
    list_only: tuple[str, ...] = ()


def _policy(dirs: RunDirs, command: Command) -> Policy:
    def real(roles: Iterable[str]) -> tuple[str, ...]:
        return tuple(os.path.realpath(dirs.role(r)) for r in roles)

    write, delete = real(command.writes), real(command.deletes)
    # every command reads the user's config file (profiles: statekit config show)
    config = (os.path.realpath(dirs.home / ".config" / "statekit" / "config.toml"),)
    # what a command may create it may also remove again (temp files, a failed output)
    return Policy(read=real(command.reads) + write + delete + config, write=write, delete=delete + write,
                  list_only=real(command.lists))


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


# per logged operation: the operation of each path argument in order (the last repeats)
_ARG_OPS = {"rename": ("rename",), "copy": ("read", "write"), "link": ("read", "write")}


def audit_problems(events: list[dict[str, Any]], policy: Policy, system: SystemRoots) -> list[str]:
    """Audited operations outside what the policy allows, one line per distinct operation."""
    found: dict[str, None] = {}
    for event in events:
        op = event["op"]
        if op in ("exec", "net", "unpickle", "unparsable", "hook-error"):
            found[f"{op}: {event['event']} {event['raw'][:1]}"] = None
            continue
        ops = _ARG_OPS.get(op, (op,))
        for i, (raw, real) in enumerate(zip(event["raw"], event["real"])):
            arg_op = ops[min(i, len(ops) - 1)]
            if raw in system.import_tokens and arg_op in ("read", "list"):
                continue  # the import system probing a sys.path hook entry
            if real is None:
                found[f"{arg_op} of an unresolvable path {raw!r} ({event['event']})"] = None
            elif not _allowed(arg_op, real, policy, system):
                via = f" (via {raw})" if raw != real else ""
                found[f"{arg_op} outside the allowed directories: {real}{via} [{event['event']}]"] = None
    return list(found)


def _allowed(op: str, real: str, policy: Policy, system: SystemRoots) -> bool:
    if op == "list" and real in policy.list_only:
        return True
    if op in ("read", "list"):
        return _inside(real, policy.read) or _inside(real, system.read)
    if op == "delete":
        return _inside(real, policy.delete)
    if op == "rename":
        return _inside(real, policy.write) or _inside(real, policy.delete)
    return _inside(real, policy.write)


def _check_trees(dirs: RunDirs, command: Command, result: RunResult, guarded: Guarded) -> list[str]:
    problems = []
    after = Guarded.take(dirs)
    snap_rel = dirs.snapshot_name
    for name, before in guarded.trees.items():
        skip = snap_rel if (name == "parent" and command.disposes) else None
        changes = tree_changes(before, after.trees[name], skip=skip)
        if changes:
            problems.append(f"{name}/ changed: {', '.join(changes[:8])}" + (" ..." if len(changes) > 8 else ""))
    if command.disposes:
        snap_before = {k: v for k, v in guarded.trees["parent"].items() if k == snap_rel or k.startswith(snap_rel + "/")}
        snap_after = {k: v for k, v in after.trees["parent"].items() if k == snap_rel or k.startswith(snap_rel + "/")}
        if result.returncode == 0 and snap_after:
            problems.append(f"dispose exited 0 but left {len(snap_after)} entries of the snapshot")
        if result.returncode != 0 and tree_changes(snap_before, snap_after):
            problems.append("dispose failed but changed the snapshot: "
                            + ", ".join(tree_changes(snap_before, snap_after)[:8]))
    return problems


def _check_scratch(dirs: RunDirs, command: Command, result: RunResult) -> list[str]:
    problems = []
    for name, path in (("TMPDIR", dirs.tmp), ("HOME", dirs.home), ("working directory", dirs.cwd)):
        left = sorted(os.listdir(path))
        if left:
            problems.append(f"{name} not empty afterwards: {left[:5]}")
    outputs = sorted(os.listdir(dirs.outdir))
    if command.produces_output and result.returncode == 0:
        if outputs != ["result"] or not (dirs.out / "_metadata").is_file():
            problems.append(f"exit 0 but the output directory holds {outputs} (expected exactly result/ with _metadata)")
    elif outputs:
        problems.append(f"exit {result.returncode} but the output directory holds {outputs[:5]}")
    return problems


# ----------------------------------------------------------------------------- reporting


@dataclass(frozen=True)
class Outcome:
    """One run and every invariant it broke (none: it passed)."""

    case: str
    mutation: str
    command: Command
    result: RunResult
    problems: list[str]
    run_dir: Path

    @property
    def failed(self) -> bool:
        return bool(self.problems)

    def render(self) -> str:
        r = self.result
        rc = "killed (time limit)" if r.hung else str(r.returncode)
        shown_argv = " ".join(r.argv[:4]) + " AUDIT_LOG AS FSIZE " + " ".join(_shell_word(a) for a in r.argv[7:])
        peak = "unknown" if r.peak_rss_mib is None else f"{r.peak_rss_mib:.0f} MiB"
        lines = [
            f"[{self.case}] {self.command.name}: {self.problems[0] if self.problems else 'ok'}",
            f"  mutation: {self.mutation}",
            f"  command:  {shown_argv}",
            f"  exit code {rc}, {r.elapsed_s:.2f} s, peak RSS {peak}; run directory {self.run_dir}",
        ]
        lines += [f"  also: {problem}" for problem in self.problems[1:9]]
        if len(self.problems) > 9:
            lines.append(f"  ... and {len(self.problems) - 9} more")
        lines.append("  stderr: " + _quote(r.stderr))
        lines.append("  stdout: " + _quote(r.stdout))
        return "\n".join(lines)


def _shell_word(text: str) -> str:
    return text if re.fullmatch(r"[\w@%+=:,./-]+", text) else "'" + text.replace("'", "'\\''") + "'"


def _quote(text: str) -> str:
    text = text.strip()
    if not text:
        return "(empty)"
    short = text if len(text) <= SHOWN else text[:SHOWN] + f" ... [{len(text) - SHOWN} more characters]"
    return "\n    " + short.replace("\n", "\n    ")


def report(outcomes: Sequence[Outcome], *, detailed: int = 40) -> str:
    """A readable assertion message: distinct problems per command, then the first failing runs in full."""
    failed = [o for o in outcomes if o.failed]
    kinds: dict[tuple[str, str], list[str]] = {}
    for o in failed:
        for problem in o.problems:
            kinds.setdefault((o.command.name, re.sub(r"/\S+", "<path>", problem)[:140]), []).append(o.case)
    summary = [f"  {command}: {kind}  x{len(cases)}  (e.g. {', '.join(dict.fromkeys(cases[:3]))})"
               for (command, kind), cases in sorted(kinds.items())]
    shown = "\n\n".join(o.render() for o in failed[:detailed])
    more = f"\n\n... and {len(failed) - detailed} more failing runs" if len(failed) > detailed else ""
    return (f"{len(failed)} of {len(outcomes)} run(s) failed; distinct problems:\n" + "\n".join(summary)
            + "\n\n" + shown + more)


# ----------------------------------------------------------------------------- driving


@dataclass(frozen=True)
class Job:
    """One run to do: a fresh directory prepared by ``prepare``, then ``command`` in it."""

    case: str
    mutation: str
    command: Command
    dirs: RunDirs
    prepare: Callable[[RunDirs], None]


def run_job(job: Job) -> Outcome:
    job.prepare(job.dirs)
    guarded = Guarded.take(job.dirs)
    result = run_child(job.dirs, job.command.args(job.dirs))
    problems = check_run(job.dirs, job.command, result, guarded, system_roots())
    if not problems:
        shutil.rmtree(job.dirs.root, ignore_errors=True)  # keep only failing runs for inspection
    return Outcome(job.case, job.mutation, job.command, result, problems, job.dirs.root)


def run_jobs(jobs: Sequence[Job]) -> list[Outcome]:
    """Run jobs ``WORKERS`` at a time; the outcomes in job order."""
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(run_job, jobs))


CASE_PARAM = "case"


def selected_cases(request: Any) -> list[str]:
    """Case names (parameter ``case``) of the requesting module's tests that this session runs.

    Honors -k and node ids, so running one case runs only its jobs; ``slow`` tests run their own.
    """
    names: dict[str, None] = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "module", None) is not request.module or callspec is None:
            continue
        if CASE_PARAM in callspec.params and item.get_closest_marker("slow") is None:
            names[str(callspec.params[CASE_PARAM])] = None
    return list(names)


def run_cases(cases: Sequence[str], jobs_of: Callable[[str], list[Job]]) -> dict[str, list[Outcome]]:
    """Every job of every case in one pool (both cores busy); the outcomes grouped by case."""
    grouped: dict[str, list[Outcome]] = {case: [] for case in cases}
    for outcome in run_jobs([job for case in cases for job in jobs_of(case)]):
        grouped[outcome.case].append(outcome)
    return grouped
