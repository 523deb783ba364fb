"""Children timed by a bench import statekit as an installed copy does: from bytecode caches.

With ``PYTHONDONTWRITEBYTECODE`` set (some shells and CI images set it), no ``__pycache__``
is written, and every child Python compiles every statekit module it imports from source:
0.1-0.2 s more per command here, which a user's installed copy never pays. A bench that
times children calls :func:`use_bytecode_caches` first: the variable is dropped for its
children and statekit's packages are compiled once, before anything is timed.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import sys

PACKAGES = ("statefmt", "readers", "writers", "flink", "runtime", "spark", "cli")


def use_bytecode_caches() -> None:
    """Drop ``PYTHONDONTWRITEBYTECODE`` for this process and its children; compile statekit."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        print("bench: PYTHONDONTWRITEBYTECODE was set; dropped for the timed children", file=sys.stderr)
    sys.dont_write_bytecode = False
    for name in PACKAGES:
        spec = importlib.util.find_spec(f"statekit.{name}")
        for location in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(location, quiet=1)
