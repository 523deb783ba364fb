"""Spark's Python worker daemon, importing pyspark from the installed package rather than
from Spark's ``pyspark.zip`` (``spark.python.daemon.module``, set for local masters by
:mod:`statekit.spark.session`).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on its Python
workers' path. Python keeps no bytecode cache for what it imports from a zip, so every
daemon compiled pyspark from source: 0.50 s per daemon start on this machine, against 0.09 s
from the installed package. Invariant: a zip is dropped from ``sys.path`` only when it lies
inside the installed ``pyspark`` package (``pip install pyspark``: the same pyspark) and the
package it holds is importable from that package's own directory; any other path is left
as it is, and the daemon is Spark's own ``pyspark.daemon``.
"""

from __future__ import annotations

import os
import sys

__all__ = ["bundled_zips", "main"]


def bundled_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are zips bundled inside an installed pyspark package
    whose modules (pyspark, py4j) are importable from that package's parent directory."""
    dropped = []
    for entry in path:
        lib, name = os.path.split(entry)
        if not name.endswith(".zip") or not lib.endswith(os.path.join("pyspark", "python", "lib")):
            continue
        package = os.path.dirname(os.path.dirname(lib))  # .../site-packages/pyspark
        site = os.path.dirname(package)
        module = "pyspark" if name == "pyspark.zip" else "py4j" if name.startswith("py4j-") else None
        if module is None or site not in path:
            continue
        if os.path.isfile(os.path.join(package, "__init__.py")) and os.path.isfile(
                os.path.join(site, module, "__init__.py")):
            dropped.append(entry)
    return dropped


def main() -> None:
    """Run Spark's daemon (``pyspark.daemon.manager``) with the bundled zips off the path."""
    drop = set(bundled_zips(sys.path))
    if drop:
        sys.path[:] = [entry for entry in sys.path if entry not in drop]
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
