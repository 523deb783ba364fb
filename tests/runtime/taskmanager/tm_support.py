"""What the TaskManager tests share: the test job, its truth and output, the processes of a job."""

from __future__ import annotations

import collections
import os
from pathlib import Path

JOB = str(Path(__file__).with_name("jobs") / "numbers.py")


def truth(count: int, keys: int = 100) -> dict[int, int]:
    sums: dict[int, int] = collections.defaultdict(int)
    for n in range(count):
        sums[n % keys] += n
    return dict(sums)


def final_sums(output: Path) -> dict[int, int]:
    names = os.listdir(output)
    assert not [n for n in names if n.startswith(".")], "pending or in-progress files are visible"
    sums: dict[int, int] = {}
    for name in names:
        for line in (output / name).read_text().splitlines():
            key, total = (int(x) for x in line.split("\t"))
            sums[key] = max(sums.get(key, 0), total)
    return sums


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def task_managers(pid: int) -> list[int]:
    found = []
    for child in children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"statekit.runtime.taskmanager" in cmdline.read():
                    found.append(child)
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
