"""statefmt.allocator: freed large arrays are reused instead of faulted in again (glibc only)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

LOOP = """
import resource, sys
import numpy as np
from statekit.statefmt.allocator import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory() is True and retain_freed_memory() is True
np.ones(1 << 20).sum()  # numpy's own first allocations, before counting
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):  # like a key group's temporaries: several arrays of MiBs alive at once, then freed
    arrays = [np.ones(2 << 20) for _ in range(3)]  # 3 x 16 MiB: more than glibc trims at by default
    del arrays
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_retained_memory_is_reused_without_page_faults() -> None:
    pytest.importorskip("numpy")

    def faults(mode: str) -> int:
        return int(subprocess.run([sys.executable, "-c", LOOP, mode], check=True, capture_output=True,
                                  text=True).stdout)

    default, retained = faults("default"), faults("retain")
    # default: returned to the system each time and faulted in anew; retained: faulted in once, then reused
    assert retained * 10 < default, (retained, default)
