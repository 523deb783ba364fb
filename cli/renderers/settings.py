"""Renderers of ``statekit config show`` and ``statekit spark start|status|stop``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Console

from statekit.cli.renderers.markup import Column, _e, human_age, print_table

if TYPE_CHECKING:
    from statekit.cli.config import ConfigReport
    from statekit.spark.connect_server import SparkServerStatus

__all__ = ["config_report", "spark_server_status"]


def config_report(console: Console, r: ConfigReport) -> None:
    exists = "" if r.exists else " (no such file: nothing configured)"
    console.print(f"config file: {_e(r.path)}{_e(exists)}", soft_wrap=True)
    profile = r.profile or "none"
    console.print(f"profile: {_e(profile)} ({_e(r.profile_source)})"
                  + (f"; profiles: {_e(', '.join(r.profiles))}" if r.profiles else ""), soft_wrap=True)
    print_table(console, None, [Column("setting", key=True), Column("value", key=True), Column("from")],
                [[s.key, "-" if s.value is None else _text(s.value),
                  s.source + (f" {s.detail}" if s.detail else "")] for s in r.settings])


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def spark_server_status(console: Console, r: SparkServerStatus) -> None:
    console.print(_e(r.message), soft_wrap=True)
    if r.server is not None and r.running:
        import time

        s = r.server
        uptime = human_age(max(0.0, time.time() - s.started_ms / 1000))
        console.print(f"  url {_e(s.url)}  pid {s.pid}  master {_e(s.master)}  pyspark {_e(s.pyspark)}  "
                      f"up {_e(uptime)}", soft_wrap=True)
        console.print(f"  log {_e(s.log)}", soft_wrap=True)
