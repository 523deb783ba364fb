"""docs/CLI.md is generated from the commands and must match them; README stays true."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from statekit.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_up_to_date() -> None:
    expected = _generator().render()
    actual = (ROOT / "docs" / "CLI.md").read_text()
    assert actual == expected, "docs/CLI.md is stale: run `python scripts/gen_cli_docs.py`"


def test_every_usage_line_names_its_command_once() -> None:
    text = (ROOT / "docs" / "CLI.md").read_text()
    headings = re.findall(r"^##+ (statekit(?: [a-z-]+)*)\n", text, re.M)
    usages = re.findall(r"^Usage: (statekit(?: [a-z-]+)*)(?: \[OPTIONS\]|$)", text, re.M)
    assert usages == headings, "usage lines do not match their headings"
    for usage in usages:
        words = usage.split()
        assert len(words) == len(set(words)), f"usage line repeats a word: {usage}"


def test_every_command_is_documented() -> None:
    text = (ROOT / "docs" / "CLI.md").read_text()
    for name in COMMANDS:
        assert f"## statekit {name}\n" in text


def test_readme_has_exactly_two_setup_commands_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set-up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", setup, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["./scripts/demo.sh", "./scripts/test.sh"]
    for command in commands:
        assert (ROOT / command).is_file()
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_docs_links_resolve() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", doc.read_text()):
            assert (doc.parent / target).is_file(), f"{doc.name} links to missing {target}"
