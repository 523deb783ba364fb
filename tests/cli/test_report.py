"""``statekit report``: one self-contained HTML page, parsed back and checked value by value."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.readers.inspection import inspect_snapshot
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.rescale import plan_rescale
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-2.3" / "hashmap"
FLINK_SAVEPOINT = GOLDEN / "savepoints" / "savepoint-962f67-bfc4c25148ed"
FLINK_JOB = GOLDEN / "checkpoints" / "962f676fad747434cac50f82ef230c8d"

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
NAMES = StateDescriptor("names", StateKind.MAP, value_type="string", user_key_type="string")
OFFSETS = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_type="int")
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "wbr"}


class Page(HTMLParser):
    """The page parsed strictly: every element closed in order, texts, tags and attributes collected."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self.doctype = ""
        self.feed(text)
        self.close()

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.texts.append(data.strip())

    @property
    def text(self) -> str:
        return "\n".join(self.texts)

    def count(self, tag: str) -> int:
        return sum(1 for t, _ in self.tags if t == tag)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def report(path: Path | str, out: Path, *extra: str) -> Page:
    result = run("report", str(path), "-o", str(out), *extra)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    page = Page(text)
    assert page.errors == [] and page.stack == [], (page.errors, page.stack)
    assert page.doctype.lower() == "doctype html"
    lowered = text.lower()
    for reference in ("http:", "https:", "<script", "src=", "href=", "url(", "@import", "<link"):
        assert reference not in lowered, reference  # needs no network, runs nothing
    return page


@pytest.fixture
def skewed(tmp_path: Path) -> str:
    """A keyed operator whose key group of ``hot`` holds most bytes, and an operator-state operator."""
    rows = [(f"k{i}", i) for i in range(300)] + [("hot", 10**9)]
    names = [(f"k{i}", f"n{j}", "x" * (400 if i == 0 else 4)) for i in range(40) for j in range(3)]
    path = str(tmp_path / "sp")
    (SavepointWriter.new_savepoint(32).with_operator("counter", {COUNT: rows, NAMES: names}, parallelism=2)
     .with_operator("source", {OFFSETS: [1, 2, 3, 4]}, parallelism=2).write(path))
    return path


def test_statekit_savepoint_page_holds_its_figures(skewed: str, tmp_path: Path) -> None:
    page = report(skewed, tmp_path / "r.html")
    view = json_data(inspect_snapshot(skewed))
    text = page.text
    for op in view["operators"]:
        assert op["uid"] in text and f"{op['bytes']:,}" in text
        for state in op["keyed_states"] + op["operator_states"]:
            assert state["name"] in text and f"{state['bytes']:,}" in text and f"{state['entries']:,}" in text
    assert f"{view['bytes']:,} bytes" in text
    # one skew chart (one bar per key group) for the one keyed operator
    assert page.count("svg") == 1 and page.count("rect") == 32
    sections = [attrs["data-uid"] for tag, attrs in page.tags if tag == "section"]
    assert sections == ["counter", "source"]


def test_rescale_preview_is_the_planners(skewed: str, tmp_path: Path) -> None:
    page = report(skewed, tmp_path / "r.html", "-p", "3", "-p", "8")
    reader = SavepointReader.read(skewed)
    for p in (3, 8):
        plan = next(x for x in plan_rescale(reader, operator_parallelism={"counter": p}) if x.uid == "counter")
        per_subtask = ", ".join(f"{s.bytes:,}" for s in plan.subtasks)
        assert per_subtask in page.text and f"{plan.skew:.2f}" in page.text
    assert "Rescale preview" in page.text


def test_key_group_chart_marks_the_hot_key_group(skewed: str, tmp_path: Path) -> None:
    page = report(skewed, tmp_path / "r.html")
    view = inspect_snapshot(skewed)
    counter = next(o for o in view.operators if o.uid == "counter")
    sizes: dict[int, int] = {}
    reader = SavepointReader.read(skewed)
    op = reader.operator("counter")
    for subtask in op.subtasks:
        for file in subtask.files:
            with reader.open_subtask_file(op, subtask, file) as state_file:
                for entry in state_file.index:
                    sizes[entry.key_group] = sizes.get(entry.key_group, 0) + entry.length
    hottest = max(sizes, key=lambda g: sizes[g])
    assert f"key group {hottest}: {sizes[hottest]:,} bytes" in page.text
    assert counter.states[0].skew is not None and f"{max(sizes.values()):,}" in page.text


def test_flink_savepoint_page(tmp_path: Path) -> None:
    page = report(FLINK_SAVEPOINT, tmp_path / "f.html")
    view = json.loads(run("--json", "inspect", str(FLINK_SAVEPOINT)).stdout)
    text = page.text
    assert "flink savepoint 5" in text
    keyed = [op for op in view["operators"] if op["keyed_states"]]
    assert keyed
    for op in view["operators"]:
        assert op["label"] in text and f"{op['bytes']:,}" in text
        for state in op["keyed_states"]:
            assert state["name"] in text
    assert page.count("svg") == len(keyed)
    assert page.count("rect") == sum(op["max_parallelism"] for op in keyed)


def test_flink_key_group_sizes_add_up_to_the_keyed_bytes(tmp_path: Path) -> None:
    from statekit.flink.report import key_group_sizes
    from statekit.flink.snapshot import open_flink_snapshot

    snapshot = open_flink_snapshot(str(FLINK_SAVEPOINT))
    for op in snapshot.metadata.operators:
        sizes = key_group_sizes(op)
        handles = [h for sub in op.subtasks for h in sub.keyed_handles if h.delegate is not None]
        if sizes is None:
            assert not handles
            continue
        assert sum(sizes.sizes) == sum(h.delegate.size - h.key_group_offsets[0] for h in handles if h.delegate)


def test_checkpoint_directory_has_the_history(tmp_path: Path) -> None:
    job = tmp_path / "job"
    sizes = []
    for i in (1, 2, 3):
        metadata = (SavepointWriter.new_savepoint(16)
                    .with_operator("counter", {COUNT: [(f"w{j}", j) for j in range(100 * i)]}, parallelism=2)
                    .write(str(job / f"chk-{i}")))
        sizes.append(sum(f.size for op in metadata.operators for s in op.subtasks for f in s.files))
    (job / "chk-4").mkdir()  # a checkpoint that never completed
    page = report(job, tmp_path / "h.html")
    listing = json.loads(run("--json", "checkpoints", "list", str(job)).stdout)["snapshots"]
    assert len(listing) == 4
    text = page.text
    assert "Checkpoint history" in text and "4 snapshot(s)" in text
    for row in listing:
        assert row["path"] in text and f"{row['size']:,}" in text
    assert "incomplete" in text
    assert page.count("svg") == 2  # the skew chart of the latest complete one, and the history
    assert sizes == sorted(sizes)


def test_flink_job_directory_reports_its_latest_checkpoint(tmp_path: Path) -> None:
    page = report(FLINK_JOB, tmp_path / "j.html")
    assert "Checkpoint history" in page.text and str(FLINK_JOB / "chk-4") in page.text


def test_bad_inputs_exit_2_with_one_line(skewed: str, tmp_path: Path) -> None:
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases: list[tuple[list[str], str]] = [
        ([str(tmp_path / "missing"), "-o", str(tmp_path / "a.html")], "no such file or directory"),
        ([str(text_file), "-o", str(tmp_path / "b.html")], "notes.txt"),
        ([str(empty), "-o", str(tmp_path / "c.html")], "empty"),
        ([skewed, "-o", str(tmp_path)], "is a directory"),
        ([skewed, "-o", str(tmp_path / "nowhere" / "d.html")], "directory does not exist"),
    ]
    for args, expected in cases:
        result = run("report", *args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.output, result.output
    usage = run("report", skewed, "-o", str(tmp_path / "e.html"), "-p", "0")  # click's usage error
    assert usage.exit_code == 2 and "0 is not in the range" in usage.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "notes.txt", "sp"]


def test_the_page_is_replaced_whole(skewed: str, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    out.write_text("old page")
    report(skewed, out)
    assert out.read_text().startswith("<!DOCTYPE html>")
    failed = run("report", str(tmp_path / "missing"), "-o", str(out))
    assert failed.exit_code == 2 and out.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_json_output(skewed: str, tmp_path: Path) -> None:
    result = run("--json", "report", skewed, "-o", str(tmp_path / "r.html"))
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    assert (data["engine"], data["operators"], data["history"]) == ("statekit", 2, 0)
    assert data["bytes"] == (tmp_path / "r.html").stat().st_size
