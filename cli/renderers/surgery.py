"""Renderers of savepoint surgery: rescale, modify, bootstrap."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from statekit.cli.renderers.markup import Column, _e, human_bytes, print_table

if TYPE_CHECKING:
    from statekit.writers.bootstrap import BootstrapReport
    from statekit.writers.rescale import RescaleReport
    from statekit.writers.savepoint_modification import ModifyReport

__all__ = ["rescale_report", "modify_report", "bootstrap_report"]

_SUBTASK = Column("subtask", key=True, right=True)
_KEY_GROUPS = Column("key groups")


def rescale_report(console: Console, r: RescaleReport) -> None:
    if r.dry_run:
        console.print(f"[bold]Rescale plan[/] for {_e(r.source)} (dry run: nothing written)", soft_wrap=True)
    else:
        console.print(f"[green]Rescaled[/] {_e(r.source)} -> {_e(r.output)} in {r.elapsed_s:.2f} s "
                      f"({human_bytes(r.bytes_read)} read, {human_bytes(r.bytes_written)} written)", soft_wrap=True)
    for op in r.operators:
        p_old, p_new = op.old_parallelism, op.parallelism
        m_old, m_new = op.old_max_parallelism, op.max_parallelism
        change = f"parallelism {p_old} -> {p_new}" if p_old != p_new else f"parallelism {p_new}"
        change += f", max parallelism {m_old} -> {m_new}" if m_old != m_new else f", max parallelism {m_new}"
        console.print(f"operator [bold]{_e(op.uid)}[/]: {_e(op.action)}, {_e(change)}", soft_wrap=True)
        if op.keyed_states:
            estimated = " (estimated)" if op.bytes_estimated else ""
            print_table(console, None, [_SUBTASK, _KEY_GROUPS, Column("with state", right=True, drop=1),
                                        Column(f"bytes{estimated}", right=True), Column("entries", right=True)],
                        [[str(s.index), f"{s.key_group_range.start}-{s.key_group_range.end}", str(s.key_groups),
                          human_bytes(s.bytes), str(s.entries)] for s in op.subtasks])
            console.print(f"  keyed states {_e(', '.join(op.keyed_states))}: {human_bytes(op.bytes)}, "
                          f"{_e(op.entries)} entries, skew {op.skew:.2f} (largest subtask / mean)", soft_wrap=True)
        for st in op.operator_states:
            console.print(f"  {_e(st.kind)} state {_e(st.name)}: elements per subtask {_e(list(st.elements))}", soft_wrap=True)


def modify_report(console: Console, r: ModifyReport) -> None:
    if r.dry_run:
        console.print(f"[bold]Modify plan[/] for {_e(r.source)} (dry run: nothing written)", soft_wrap=True)
    else:
        console.print(f"[green]Wrote[/] {_e(r.output)} from {_e(r.source)} in {r.elapsed_s:.2f} s", soft_wrap=True)
    for uid in r.removed_operators:
        console.print(f"  removed operator {_e(uid)}", soft_wrap=True)
    for uid, state in r.removed_states:
        console.print(f"  removed state {_e(uid)}/{_e(state)}", soft_wrap=True)
    for old, new in r.renamed:
        console.print(f"  renamed {_e(old)} -> {_e(new)}", soft_wrap=True)
    print_table(console, None, [Column("uid", key=True), Column("was", key=True), Column("parallelism", right=True),
                                Column("max parallelism", right=True, drop=2), Column("states"),
                                Column("files", right=True, drop=1), Column("bytes", right=True)],
                [[op.uid, op.renamed_from or "", str(op.parallelism), str(op.max_parallelism),
                  ", ".join(op.states) or "-", str(op.files), human_bytes(op.bytes)] for op in r.operators])


def bootstrap_report(console: Console, r: BootstrapReport) -> None:
    console.print(f"[green]Bootstrapped[/] {_e(r.uid)}/{_e(r.state)} ({_e(r.kind)}) into {_e(r.output)} in {r.elapsed_s:.2f} s: "
                  f"{_e(r.rows_read)} rows -> {_e(r.entries)} entries, {human_bytes(r.bytes)}", soft_wrap=True)
    console.print(f"  parallelism {_e(r.parallelism)}, max parallelism {_e(r.max_parallelism)}, "
                  f"value type {_e(r.value_type or 'any')} ({_e(r.value_serializer)})", soft_wrap=True)
    if r.copied_operators:
        console.print(f"  copied from {_e(r.from_savepoint)}: {_e(', '.join(r.copied_operators))}", soft_wrap=True)
    print_table(console, None, [_SUBTASK, _KEY_GROUPS, Column("bytes", right=True), Column("entries", right=True)],
                [[str(s.index), f"{s.key_group_range.start}-{s.key_group_range.end}", human_bytes(s.bytes),
                  str(s.entries)] for s in r.subtasks])
