"""Generate docs/CLI.md from the commands' own help, so the reference never drifts.

    python scripts/gen_cli_docs.py          # rewrite docs/CLI.md
    python scripts/gen_cli_docs.py --check  # exit 1 if docs/CLI.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from statekit.cli.main import COMMANDS, cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "CLI.md"

INTRO = """# statekit command reference

Generated from the commands' help by `scripts/gen_cli_docs.py`; `tests/cli/test_docs.py`
fails when this file and the commands disagree.

Every command takes `--json` (machine-readable output) and `--verbose` (tracebacks and
engine logs), before or after the command name. Paths are local paths or fsspec URLs
(`file://`, `memory://`, `s3://`, ...).

## Exit codes

| code | meaning |
|---|---|
| 0 | success |
| 1 | a failed check: `verify` found damage, `diff` found differences, a job failed |
| 2 | bad input: a missing or malformed path, a bad option, a damaged source, an unreachable object store; one line on stderr names the path and the cause |
| 3 | internal error (a bug): rerun with `--verbose` for the traceback and report it |
| 130 | interrupted |

## Output in pipes and scripts

Tables are drawn for the terminal they go to. When stdout is not a terminal (a pipe, a file)
they are not cut to 80 columns: every value is printed whole, and lines are as long as the
values need. `COLUMNS=N` sets the width explicitly, on a terminal or off one. For scripts,
`--json` prints one JSON document per command on stdout.

With `--json`, a failure is JSON too: stdout stays empty (a redirected result file is never
half an answer) and stderr holds exactly one line, one JSON object:

```json
{"error": {"message": "/data/sp/_metadata: not a statekit or Apache Flink _metadata file: ...",
           "path": "/data/sp/_metadata", "exit_code": 2, "type": "MetadataError"}}
```

`message` is the text mode's line (several reasons are separated by newlines), `path` the
file or directory it names (`null` when none), `exit_code` the process's exit code (the same
as without `--json`), `type` the error class. Usage errors (an unknown option, a missing
argument) are reported the same way, with exit code 2:

```bash
if ! out=$(statekit --json inspect "$sp" 2>err.json); then
  jq -r .error.message err.json
fi
```

## Object stores: `--storage-option` and `STATEKIT_STORAGE_OPTIONS`

Every command that takes a path takes `--storage-option KEY=VALUE` (repeatable): options
for the fsspec filesystem of `s3://`, `gs://`, `abfs://`... paths (s3fs, gcsfs, adlfs).
A dotted key nests (`client_kwargs.endpoint_url=URL` is `{"client_kwargs": {"endpoint_url":
URL}}`); a value is read as JSON when it parses (`true`, `5242880`, `{"connect_timeout": 5}`,
`'"007"'` for a string of digits), else taken as written. The environment variable
`STATEKIT_STORAGE_OPTIONS` holds the same options as one JSON object; `--storage-option`
wins key by key. Local paths and `memory://` never receive them.

An S3-compatible store at a custom endpoint (MinIO, Ceph, LocalStack, moto):

```bash
statekit inspect s3://state/savepoints/savepoint-1a2b3c-0123456789ab \
  --storage-option client_kwargs.endpoint_url=http://127.0.0.1:9000 \
  --storage-option client_kwargs.region_name=us-east-1 \
  --storage-option key=minioadmin --storage-option secret=minioadmin

# the same for every command of a shell session
export STATEKIT_STORAGE_OPTIONS='{"key": "minioadmin", "secret": "minioadmin",
  "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "us-east-1"}}'
statekit rescale s3://state/savepoints/savepoint-1a2b3c-0123456789ab -p 4 -o s3://state/rescaled
statekit checkpoints list s3://state/checkpoints

# a public bucket, no credentials
statekit verify s3://public-bucket/savepoint-1 --storage-option anon=true
```

A command passes its options on to the processes it starts (the background process of
`run -d`) through `STATEKIT_STORAGE_OPTIONS`; Spark executors on a cluster read the same
variable (`--conf spark.executorEnv.STATEKIT_STORAGE_OPTIONS=...`). A running job writes
savepoints with the options it was started with, so `savepoint`, `stop` and `cancel` take none. An unreachable endpoint,
missing or wrong credentials, or a denied access is exit 2 (`statekit: error: object store:
...`).

## The HTML report: `statekit report PATH -o report.html`

One file, viewable offline (inline CSS and SVG charts; no script, no external reference),
replaced atomically. For a statekit or Apache Flink savepoint or checkpoint: a summary
(engine, kind, format, checkpoint id, size), a table of operators (parallelism, max
parallelism, states, bytes, key-group skew = largest key group / mean), and per operator its
states (kind, serializer or Flink backend type, bytes and entries where recorded), a bar
chart of bytes per key group (keyed operators; hover a bar for its figures) and the rescale
preview: bytes per subtask and skew at each `-p` (default 1, 2, 4, 8; parallelisms above the
max parallelism are left out) — statekit's from the rescale planner (`rescale --dry-run`),
Flink's from its key-group offsets and Flink's range formula. Incremental RocksDB
checkpoints record no per-key-group offsets: no chart there, said so on the page. A
directory of checkpoints (a job directory, a checkpoint root) reports its latest complete
snapshot plus the checkpoint history: every snapshot of `checkpoints list`, its id, kind,
status and size, and a chart of the sizes. A missing or unreadable PATH, a directory without
a complete snapshot, an output that is a directory or whose directory does not exist: exit 2.

Related documents: [FORMAT.md](FORMAT.md) (the snapshot format), [RUNTIME.md](RUNTIME.md),
[JOBS.md](JOBS.md), [RESCALE.md](RESCALE.md), [SPARK.md](SPARK.md), [FLINK.md](FLINK.md).
"""


def _help(name: str, command: click.Command, parent: click.Context) -> str:
    # info_name is the command's own name: click prefixes the parents' names in the usage line
    ctx = click.Context(command, info_name=name, parent=parent, max_content_width=96, terminal_width=96)
    return command.get_help(ctx)


def render() -> str:
    # as cli.make_context would: click caches each command's help option on first use, so a
    # context without the group's settings would render "--help" or "-h, --help" by test order
    root = click.Context(cli, info_name="statekit", max_content_width=96, terminal_width=96,
                         help_option_names=cli.context_settings["help_option_names"])
    parts = [INTRO, "## statekit\n", "```", cli.get_help(root), "```\n"]
    for name in sorted(COMMANDS):
        command = cli.get_command(root, name)
        assert command is not None
        parts += [f"## statekit {name}\n", "```", _help(name, command, root), "```\n"]
        if isinstance(command, click.Group):
            sub_ctx = click.Context(command, info_name=name, parent=root)
            for sub in sorted(command.list_commands(sub_ctx)):
                subcommand = command.get_command(sub_ctx, sub)
                assert subcommand is not None
                parts += [f"### statekit {name} {sub}\n", "```",
                          _help(sub, subcommand, sub_ctx), "```\n"]
    return "\n".join(parts)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is out of date: run python scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
