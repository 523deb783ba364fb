"""The typed seam to the CLI: every result a command shows has one rich renderer, registered
by its type in ``statekit.cli.render``; the offline verbs reach the readers only through
``statekit.flink.dispatch``; user data stays text inside rich markup."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import io
import re
import shutil
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from statekit.cli.main import COMMANDS, cli
from statekit.cli.render import RENDERER_PACKAGE, RENDERERS, class_path, render, renderer_for

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
FLINK_GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-2.3"
FLINK_CHECKPOINT = FLINK_GOLDEN / "rocksdb-incremental-inline0" / "checkpoints" / "41a19bb2434264c1a64f6d54dac65a72" / "chk-4"
MARKUP = "[/]x[bold]"


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _annotation_names(module: types.ModuleType) -> dict[str, Any]:
    """The module's globals plus what it imports under ``if TYPE_CHECKING:`` (to evaluate hints)."""
    names = dict(vars(module))
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            # the module's own import statements, run as written (nothing else is in those blocks)
            exec(compile(ast.Module(body=node.body, type_ignores=[]), str(module.__file__), "exec"), names)
    return names


def _classes(hint: object) -> set[type]:
    """The classes a return annotation names (the members of a union)."""
    members = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    return {m for m in members if isinstance(m, type) and m is not type(None)}


def _library_calls() -> dict[str, list[str]]:
    """``module.function`` of every statekit function a command module imports, by command module."""
    calls: dict[str, list[str]] = {}
    for module_name in sorted({spec[0] for spec in COMMANDS.values()}):
        tree = ast.parse((CLI_DIR / f"{module_name.rsplit('.', 1)[1]}.py").read_text(encoding="utf-8"))
        found = calls.setdefault(module_name, [])
        for node in ast.walk(tree):
            # the CLI's own modules are not the library, except its config file (statekit config show)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("statekit.") \
                    and (not node.module.startswith("statekit.cli") or node.module == "statekit.cli.config"):
                found.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return calls


# dataclasses library functions return to commands that are inputs of a result, not shown:
NOT_RESULTS = {
    "statekit.cli.config.Setting",  # part of ConfigReport
    "statekit.flink.savepoint_bootstrap.FlinkBootstrapSpec",  # bootstrap --spec, parsed
    "statekit.spark.connect_server.ServerInfo",  # part of SparkServerStatus
    "statekit.writers.report.SnapshotReport",  # the page's data; the command shows ReportResult
}


def _results_of(target: str) -> set[type]:
    """The result classes (dataclasses) the function ``target`` returns, by its annotation."""
    module_name, _, name = target.rpartition(".")
    module = importlib.import_module(module_name)
    func = getattr(module, name)
    if inspect.isclass(func) or not callable(func):
        return set()
    owner = importlib.import_module(func.__module__)
    hints = typing.get_type_hints(func, globalns=_annotation_names(owner))
    return {cls for cls in _classes(hints.get("return"))
            if dataclasses.is_dataclass(cls) and class_path(cls) not in NOT_RESULTS}


def _shown_results() -> dict[type, str]:
    """Every result class a command can show, with one library function that returns it."""
    return {cls: target for targets in _library_calls().values() for target in targets for cls in _results_of(target)}


# ------------------------------------------------------------------ the registry


def test_every_result_a_command_shows_has_a_renderer() -> None:
    shown = _shown_results()
    assert len(shown) >= 19, sorted(class_path(c) for c in shown)
    missing = sorted(f"{class_path(cls)} (returned by {target})" for cls, target in shown.items()
                     if class_path(cls) not in RENDERERS)
    assert not missing, "results without a renderer in statekit.cli.render.RENDERERS:\n" + "\n".join(missing)


def test_every_registered_type_is_a_result_some_command_shows() -> None:
    shown = {class_path(cls) for cls in _shown_results()}
    assert sorted(set(RENDERERS) - shown) == []


@pytest.mark.parametrize("path", sorted(RENDERERS))
def test_each_renderer_is_registered_for_an_existing_class_and_typed_with_it(path: str) -> None:
    module_name, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name, None)
    assert inspect.isclass(cls), f"{path}: no such class"
    assert class_path(cls) == path, f"{path}: register the class by its defining module, {class_path(cls)}"
    func = renderer_for(cls)
    assert func.__module__.startswith(f"{RENDERER_PACKAGE}.")
    console_param, result_param = inspect.signature(func).parameters
    hints = typing.get_type_hints(func, localns={cls.__name__: cls})
    assert (hints[console_param], hints[result_param]) == (Console, cls)


def test_the_result_union_of_output_show_names_exactly_the_registered_classes() -> None:
    """``Output.show`` takes ``statekit.cli.render.Result``: mypy checks commands against it."""
    from statekit.cli import render as registry

    names = _annotation_names(registry)
    assert {class_path(cls) for cls in _classes(names["Result"])} == set(RENDERERS)


def test_an_unregistered_result_is_an_internal_error_not_a_fallback() -> None:
    @dataclasses.dataclass
    class Unregistered:
        name: str = "x"

    with pytest.raises(TypeError, match="no rich renderer for .*Unregistered"):
        render(Console(file=io.StringIO()), Unregistered())  # type: ignore[arg-type]


def test_rendering_imports_only_the_renderer_module_of_the_result() -> None:
    import subprocess
    import sys

    code = ("import sys; from statekit.cli.render import renderer_for; from statekit.readers.listing import "
            "CheckpointList; renderer_for(CheckpointList); "
            f"print(sorted(m for m in sys.modules if m.startswith('{RENDERER_PACKAGE}.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"['{RENDERER_PACKAGE}.markup', '{RENDERER_PACKAGE}.snapshots']"


def test_command_modules_hold_no_renderer() -> None:
    for module_name in sorted({spec[0] for spec in COMMANDS.values()}):
        source = (CLI_DIR / f"{module_name.rsplit('.', 1)[1]}.py").read_text(encoding="utf-8")
        assert "rich" not in source and "console" not in source, module_name


# ------------------------------------------------------------------ the seam


def test_the_offline_verbs_reach_the_readers_only_through_dispatch() -> None:
    readers = ("statekit.readers.listing", "statekit.readers.inspection", "statekit.readers.verification",
               "statekit.writers.disposal", "statekit.flink.key_group_lookup", "statekit.flink.snapshot",
               "statekit.flink.listing", "statekit.flink.verify", "statekit.flink.dispose", "statekit.flink.storage")
    wrong = []
    for path in sorted(CLI_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        annotations_only = {id(n) for node in tree.body if isinstance(node, ast.If) and _is_type_checking(node.test)
                            for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in annotations_only \
                    and (node.module in readers or node.module == "statekit.flink"):
                wrong.append(f"{path.relative_to(CLI_DIR)}:{node.lineno}: from {node.module} import ...")
    assert not wrong, "use statekit.flink.dispatch:\n" + "\n".join(wrong)


@pytest.mark.parametrize("name", ["list_any", "inspect_any", "verify_any", "dispose_any", "diff_flink",
                                  "lookup_key_group", "flink_snapshot_path"])
def test_the_seam_signatures_name_no_any(name: str) -> None:
    from statekit.flink import dispatch

    hints = typing.get_type_hints(getattr(dispatch, name), globalns=_annotation_names(dispatch))
    assert hints["return"] is not Any
    assert all("Any" not in repr(hint) for hint in hints.values()), hints


def test_keygroup_goes_through_the_dispatch() -> None:
    from statekit.flink.dispatch import lookup_key_group

    flink = lookup_key_group("42", key_type="int", flink=True, parallelism=4)
    statekit = lookup_key_group("42", key_type="int", parallelism=4)
    assert (flink.engine, flink.key_group, flink.max_parallelism, flink.subtask) == ("flink", 29, 128, 0)
    assert (statekit.engine, statekit.key_serializer, statekit.subtask_key_groups is not None) == (
        "statekit", "msgpack", True)


# ------------------------------------------------------------------ user data is text in markup


def _text(result: Any) -> str:
    console = Console(file=io.StringIO(), width=250, record=True)
    render(console, result)
    return console.export_text()


def test_flink_kind_format_and_state_kind_from_the_snapshot_are_text() -> None:
    """The snapshot type and format (Java trailer) and a state's KEYED_STATE_TYPE option are
    strings from the file: a crafted one is shown as written, not read as markup."""
    from statekit.flink.dispatch import inspect_any
    from statekit.flink.offline_results import FlinkInspection

    inspection = inspect_any(str(FLINK_CHECKPOINT))
    assert isinstance(inspection, FlinkInspection)
    summary = inspection.summary
    index = next(i for i, op in enumerate(summary.operators) if op.keyed_states)
    op = summary.operators[index]
    state = dataclasses.replace(op.keyed_states[0], kind=MARKUP)
    operators = list(summary.operators)
    operators[index] = dataclasses.replace(op, keyed_states=(state, *op.keyed_states[1:]))
    crafted = FlinkInspection(dataclasses.replace(summary, kind=MARKUP, format=f"{MARKUP}fmt",
                                                  operators=tuple(operators)))
    text = _text(crafted)
    assert text.splitlines()[0] == f"Flink {MARKUP} ({MARKUP}fmt) {FLINK_CHECKPOINT}"
    assert re.search(rf"^{re.escape(state.name)} +{re.escape(MARKUP)} +value=TimerSerializer", text, re.MULTILINE)


def test_a_listing_with_flink_snapshots_shows_a_markup_job_directory_as_text(tmp_path: Path) -> None:
    job = tmp_path / "[red]job"
    job.mkdir()
    shutil.copytree(FLINK_CHECKPOINT, job / "chk-4")
    (job / "chk-3").mkdir()
    (job / "chk-3" / "part").write_bytes(b"x")
    result = CliRunner(env={"COLUMNS": "250"}).invoke(cli, ["checkpoints", "list", str(job)])
    assert result.exit_code == 0, result.output
    assert any(line.endswith(f"{job}/chk-3") and " incomplete " in line for line in result.output.splitlines())
    assert result.output.splitlines()[0] == f"Snapshots in {job}"


def test_a_savepoint_path_is_printed_as_written() -> None:
    from statekit.runtime.control.results import SavepointResult

    location = "/savepoints/[bold]sp-1"
    assert _text(SavepointResult("a" * 32, location, "t", "RUNNING")).strip() == location
