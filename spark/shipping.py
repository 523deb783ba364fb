"""statekit ships itself to a cluster's executors: a zip of its own code through ``addPyFile``.

Executors of a standalone, YARN or Kubernetes cluster run whatever Python the cluster has;
statekit need not be installed there (its dependencies — pyarrow, fsspec, msgpack — must
be). Invariants:

    * a Spark Connect session always gets the zip, as a Python artifact of its server session
      (``addArtifacts(..., pyfile=True)``): the client cannot know what the server's Python has;
    * embedded local masters (``local``, ``local[n]``, ``local[*]``) ship nothing: their
      executors are threads of this process's JVM and run this interpreter;
    * any other master gets one zip per process, ``statekit/<package>/*.py`` for every
      package an executor may import (``spark`` and the layers below it), built from the modules
      this process imported — the code the driver runs is the code executors run;
    * the zip is added before the ``statekit`` data source is registered (a Python data
      source captures the session's Python includes when it is registered), and removed
      when the process exits.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import zipfile
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["EXECUTOR_PACKAGES", "build_package_zip", "is_local_master", "ship_package"]

EXECUTOR_PACKAGES = ("statefmt", "readers", "writers", "flink", "spark")

_INIT = '"""statekit, shipped to a Spark executor (statekit.spark.shipping)."""\n'


def is_local_master(master: str) -> bool:
    """True for the embedded masters, whose executors share this process's interpreter."""
    return master == "local" or master.startswith("local[")


def build_package_zip(directory: str) -> str:
    """Write ``statekit.zip`` (every executor package's ``.py`` files) into ``directory``; return its path."""
    path = os.path.join(directory, "statekit.zip")
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("statekit/__init__.py", _INIT)
        for package in EXECUTOR_PACKAGES:
            root = Path(_package_dir(package))
            for source in sorted(root.rglob("*.py")):
                if "__pycache__" not in source.parts:
                    archive.write(source, f"statekit/{package}/{source.relative_to(root).as_posix()}")
    return path


def _package_dir(package: str) -> str:
    """The folder of ``statekit.<package>`` (an editable install may map it as a namespace package)."""
    module = import_module(f"statekit.{package}")
    folders = [entry for entry in getattr(module, "__path__", []) if os.path.isdir(entry)]
    assert folders, f"statekit.{package} is a package with a folder"
    return str(folders[0])


def ship_package(session: SparkSession, master: str) -> str | None:
    """Add statekit's zip to ``session`` unless ``master`` is embedded; return the zip's path.

    ``master`` is the Connect URL for a Connect session (never embedded)."""
    if is_local_master(master):
        return None
    directory = tempfile.mkdtemp(prefix="statekit-ship-")
    atexit.register(_remove_tree, directory)
    path = build_package_zip(directory)
    from statekit.spark.session import is_connect

    if is_connect(session):
        session.addArtifacts(path, pyfile=True)  # the server's Python workers import it
    else:
        session.sparkContext.addPyFile(path)
    return path


def _remove_tree(directory: str) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)
