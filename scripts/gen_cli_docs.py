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

Every command takes `--json` (machine-readable output), `--plain` (tables without borders)
and `--verbose` (tracebacks and engine logs), before or after the command name; `--profile
NAME` (settings from the config file) goes before it. Paths are local paths or fsspec URLs
(`file://`, `memory://`, `s3://`, ...). Sizes are written in binary units everywhere (`512 B`,
`1.5 KiB`, `2.0 GiB`; JSON carries plain byte counts).

## Exit codes

| code | meaning |
|---|---|
| 0 | success |
| 1 | a failed check: `verify` found damage, `diff` found differences, a job failed |
| 2 | bad input: a missing or malformed path, a bad option, a damaged source, an unreachable object store; one line on stderr names the path and the cause |
| 3 | internal error (a bug): rerun with `--verbose` for the traceback and report it |
| 130 | interrupted |

## Output: terminals, pipes and scripts

Tables are drawn for the terminal they go to, and never cut an identifier (a uid, a state
name, a job id, a path). On a terminal a table fits its width: the secondary columns go first
(named in a dimmed line under the table: a wider terminal or `--json` shows them), then long
non-identifier cells fold onto several lines, and when even that does not fit, each row is
printed vertically, one `column  value` line per cell. The live status line of `statekit run`
drops its least useful parts to fit the terminal. `--plain` draws tables without borders;
when stdout is not a terminal (a pipe, a file) tables are always plain and never narrowed:
every value is printed whole, and lines are as long as the values need. `COLUMNS=N` sets the
width explicitly, on a terminal or off one. For scripts, `--json` prints one JSON document per
command on stdout.

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

## The config file: profiles

`~/.config/statekit/config.toml` (`$XDG_CONFIG_HOME/statekit/config.toml`; another file with
`STATEKIT_CONFIG`) holds named profiles of settings that the command line otherwise takes as
flags. A setting comes from the command's flag, else its environment variable, else the
profile in effect (`--profile NAME` before the command, else `STATEKIT_PROFILE`, else the
file's `default_profile`, else a profile named `default`), else statekit's default:

```toml
default_profile = "minio"

[profiles.minio]
savepoint_dir = "s3://state/savepoints"   # statekit savepoint JOB_ID / stop without a directory
storage_options = { key = "minioadmin", secret = "minioadmin", client_kwargs = { endpoint_url = "http://127.0.0.1:9000" } }
spark = { remote = "sc://spark.internal:15002", conf = { "spark.sql.shuffle.partitions" = "64" } }
output = "plain"                          # or "json", "rich"

[profiles.laptop]
spark.master = "local[4]"
```

| setting | flag | environment variable |
|---|---|---|
| `storage_options` | `--storage-option KEY=VALUE` (key by key) | `STATEKIT_STORAGE_OPTIONS` (key by key) |
| `spark.master`, `spark.remote` | `--master`, `--remote` | `STATEKIT_SPARK_MASTER`, `STATEKIT_SPARK_REMOTE` |
| `spark.conf` | `--conf KEY=VALUE` (key by key) | – |
| `savepoint_dir` | `savepoint JOB_ID DIR`, `stop -p DIR` | `STATEKIT_SAVEPOINT_DIR` |
| `output` (`json`, `plain`, `rich`) | `--json`, `--plain` | `STATEKIT_OUTPUT` |

`statekit config show` prints every setting in effect and where it came from (flag, env,
profile, default). A file that does not parse, an unknown key, a value of the wrong type or a
profile that is not in the file is exit 2, naming the file and the key.

## Spark without the wait: `--engine`, `statekit spark start`

`export` runs on this machine (`--engine local`: pyarrow, no JVM) or on Spark (`--engine
spark`); `--engine auto` (the default) takes the local engine below 1 GiB of state (the
recorded sizes of the states it exports) and says so under the result, Spark from there, or
when `--master`/`--remote` names a cluster or the output is not a local path. Both engines
write the same files, columns and rows. `diff` and `bootstrap` take `--engine local|spark`.

A command on Spark pays for a session start (a JVM, 10–60 s on a busy machine).
`statekit spark start` starts one local Spark Connect server for the user (127.0.0.1 only,
from the installed pyspark; state and log in the user's runtime directory); while it runs,
`export`, `diff` and `bootstrap` on Spark connect to it unless `--master`, `--remote` or the
config names another Spark, so the second command in a shell pays no session start.
`statekit spark status` shows it, `statekit spark stop` ends it. `--remote` to an address
where nothing answers fails within 10 s (exit 2, naming the address); Ctrl-C ends any
Spark-backed command within 2 s and leaves no JVM or Python worker behind.

## Shell completion

statekit completes commands, options and choices in bash, zsh and fish (click's completion):

```bash
eval "$(_STATEKIT_COMPLETE=bash_source statekit)"      # in ~/.bashrc
eval "$(_STATEKIT_COMPLETE=zsh_source statekit)"       # in ~/.zshrc
_STATEKIT_COMPLETE=fish_source statekit > ~/.config/fish/completions/statekit.fish
```

Or once, into a file the shell reads at start (faster than running statekit each time):
`_STATEKIT_COMPLETE=bash_source statekit > ~/.statekit-complete.bash`, then
`. ~/.statekit-complete.bash` in `~/.bashrc`.

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
