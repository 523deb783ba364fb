"""``readers/`` never writes: no module of it creates, writes, renames or deletes a file.

The scan reads every ``readers/*.py`` (ast, lazy imports and nested functions included) and
fails naming the file, line and call of anything that changes a filesystem: the FileIO
seam's writing methods, ``os``/``shutil``/``tempfile`` calls that create or remove, ``open``
(builtin, ``pa.OSFile``, ``os.fdopen``) with a writing mode, ``Path.write_*``. Writing lives
in ``writers/`` (``writers.diff_output``, ``writers.removal``); a reader hands rows to a
writer object its caller gives, and scratch space is ``statefmt.spill``'s.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Methods that change a filesystem whatever object they are called on (FileIO, fsspec, Path).
WRITING_METHODS = frozenset({
    "write_atomic", "open_output", "open_scratch", "rm", "rm_file", "rename", "makedirs", "mkdir", "rmdir", "unlink",
    "copy_file", "pipe_file", "put_file", "mv", "touch", "write_text", "write_bytes", "symlink_to", "rmtree",
})
# Module functions that change a filesystem (called as os.remove(...) or imported by name).
WRITING_FUNCTIONS = frozenset({
    *(f"os.{n}" for n in ("remove", "unlink", "rmdir", "removedirs", "replace", "rename", "renames", "makedirs",
                          "mkdir", "truncate", "symlink", "link", "mkfifo")),
    *(f"shutil.{n}" for n in ("rmtree", "move", "copy", "copy2", "copyfile", "copytree", "copyfileobj")),
    *(f"tempfile.{n}" for n in ("mkdtemp", "mkstemp", "NamedTemporaryFile", "TemporaryDirectory",
                                "TemporaryFile", "SpooledTemporaryFile")),
})
OPENERS = frozenset({"open", "OSFile", "fdopen"})


def _qualified_names(tree: ast.AST) -> dict[str, str]:
    """Local name -> ``module.name`` for names imported from os, shutil and tempfile."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil", "tempfile"):
            names.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
        elif isinstance(node, ast.Import):
            names.update({alias.asname or alias.name: alias.name for alias in node.names})
    return names


def _writing_mode(call: ast.Call) -> bool:
    modes = [kw.value for kw in call.keywords if kw.arg == "mode"] + call.args[1:2]
    return any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+")
               for m in modes)


def _why(call: ast.Call, names: dict[str, str]) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        called = names.get(func.id, func.id)
    elif isinstance(func, ast.Attribute):
        owner = names.get(func.value.id, func.value.id) if isinstance(func.value, ast.Name) else None
        called = f"{owner}.{func.attr}" if owner else func.attr
        if func.attr in WRITING_METHODS and called not in WRITING_FUNCTIONS:
            return f".{func.attr}()"
    else:
        return None
    if called in WRITING_FUNCTIONS:
        return f"{called}()"
    if called.rsplit(".", 1)[-1] in OPENERS and _writing_mode(call):
        return f"{called}() with a writing mode"
    return None


def writing_calls(source: str, filename: str) -> list[str]:
    """``file:line: call`` of every call in ``source`` that changes a filesystem."""
    tree = ast.parse(source, filename=filename)
    names = _qualified_names(tree)
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)),
                   key=lambda node: (node.lineno, node.col_offset))
    return [f"{filename}:{node.lineno}: {why}" for node in calls if (why := _why(node, names)) is not None]


def test_no_readers_module_writes_deletes_or_renames() -> None:
    found = [call for path in sorted((ROOT / "readers").rglob("*.py"))
             for call in writing_calls(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not found, "readers/ must only read; move these to writers/:\n" + "\n".join(found)


def test_the_scan_names_every_kind_of_writing_call() -> None:
    source = "\n".join([
        "import os, shutil, tempfile",
        "from os import remove as drop",
        "import pyarrow as pa",
        "io.write_atomic(p, b'')", "io.open_output(p)", "io.rm(p, recursive=True)", "io.rm_file(p)",
        "io.rename(a, b)", "io.makedirs(p)", "os.remove(p)", "os.unlink(p)", "os.rmdir(p)", "os.replace(a, b)",
        "os.rename(a, b)", "drop(p)", "shutil.rmtree(p)", "tempfile.mkdtemp()", "open(p, 'w')",
        "open(p, mode='ab')", "pa.OSFile(p, 'wb')", "Path(p).write_text('x')",
    ])
    found = writing_calls(source, "x.py")
    assert [line.split(": ", 1)[1] for line in found] == [
        ".write_atomic()", ".open_output()", ".rm()", ".rm_file()", ".rename()", ".makedirs()", "os.remove()",
        "os.unlink()", "os.rmdir()", "os.replace()", "os.rename()", "os.remove()", "shutil.rmtree()",
        "tempfile.mkdtemp()", "open() with a writing mode", "open() with a writing mode",
        "pyarrow.OSFile() with a writing mode", ".write_text()",
    ]
    assert found[0] == "x.py:4: .write_atomic()"


def test_reading_calls_pass_the_scan() -> None:
    source = "\n".join([
        "import os", "open(p)", "open(p, 'rb')", "io.open_input(p)", "os.lstat(p)", "os.scandir(p)",
        "text.replace('a', 'b')", "table.rename_columns(['a'])", "names.remove(x)", "os.path.join(a, b)",
    ])
    assert writing_calls(source, "x.py") == []
