"""Generate docs/json/<command>.schema.json: the JSON Schema of every command's ``--json`` output,
built from the result dataclasses by statekit.statefmt.json_contract, so the schemas never drift.

    python scripts/gen_json_schemas.py          # rewrite docs/json/
    python scripts/gen_json_schemas.py --check  # exit 1 if docs/json/ is out of date
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from statekit.cli.errors import ErrorDocument
from statekit.cli.render import COMMAND_RESULTS, command_results
from statekit.statefmt.json_contract import json_schema

DIR = Path(__file__).resolve().parent.parent / "docs" / "json"


def schema_file(command: str) -> str:
    """``checkpoints list`` -> ``checkpoints-list.schema.json``."""
    return f"{command.replace(' ', '-')}.schema.json"


def schema_of(command: str) -> dict[str, Any]:
    return json_schema(*command_results(command), title=f"statekit {command} --json",
                       description=f"The --json document of `statekit {command}` (docs/CLI.md, JSON contract).")


def render() -> dict[str, str]:
    """File name -> its text, for every command of ``COMMAND_RESULTS`` and the error document."""
    files = {schema_file(c): json.dumps(schema_of(c), indent=2) + "\n" for c in COMMAND_RESULTS}
    error = json_schema(ErrorDocument, title="statekit --json error",
                        description="A failure with --json: one line on stderr, stdout empty (docs/CLI.md).")
    files["error.schema.json"] = json.dumps(error, indent=2) + "\n"
    return files


def main(argv: list[str]) -> int:
    wanted = render()
    present = {p.name: p.read_text() for p in DIR.glob("*.schema.json")} if DIR.is_dir() else {}
    if "--check" in argv:
        stale = sorted(n for n in wanted.keys() | present.keys() if wanted.get(n) != present.get(n))
        if stale:
            print(f"docs/json/ is out of date ({', '.join(stale)}): run python scripts/gen_json_schemas.py",
                  file=sys.stderr)
            return 1
        return 0
    DIR.mkdir(parents=True, exist_ok=True)
    for name in present.keys() - wanted.keys():
        (DIR / name).unlink()
    for name, text in wanted.items():
        (DIR / name).write_text(text)
    print(f"wrote {len(wanted)} schemas to {DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
