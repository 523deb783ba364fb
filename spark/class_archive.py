"""The driver JVM's class archive (HotSpot AppCDS): a session maps the classes an earlier one loaded.

A fresh session's JVM loads and verifies ~17,000 classes from Spark's jars before its first
export ends; a HotSpot JVM (JDK 13 and later) can instead map them from a dynamic archive that
an earlier JVM wrote when it exited (``-XX:ArchiveClassesAtExit``, ``-XX:SharedArchiveFile``).

Invariants:
    * one archive per Spark installation and JVM: ``<fingerprint>.jsa`` in the archive
      directory, the fingerprint covering pyspark's version, the ``java`` that spark-submit
      runs (``$JAVA_HOME/bin/java``, else the first on ``PATH``), its ``libjvm.so`` and every
      jar of ``SPARK_HOME/jars`` (name, size, modification time) — an upgrade gets a new archive;
    * a session whose installation has no archive yet records one: its JVM writes
      ``<fingerprint>.<pid>.part`` as it exits. HotSpot writes an archive's header, which begins
      with the magic number, after everything else, so a part beginning with the magic is
      complete; a later session publishes it with an atomic rename (the first complete part
      wins, the others are removed) and removes incomplete parts older than
      :data:`STALE_PART_S` (their JVM was killed while writing);
    * a session whose installation has an archive maps it; the JVM checks the archive against
      its own build and class path and starts without it when they differ (``-Xshare:auto``):
      an archive never stops a session from starting, and a directory that cannot be written
      only means no archive;
    * ``spark.statekit.classArchive``: ``true`` (default) uses :func:`default_directory`,
      ``false`` turns the archive off, any other value is the directory to use; a user's own
      ``spark.driver.extraJavaOptions`` replaces these options (and turns the archive off).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time

__all__ = ["CONF", "DYNAMIC_MAGIC", "STALE_PART_S", "default_directory", "fingerprint", "java_options",
           "published_archive"]

CONF = "spark.statekit.classArchive"
DYNAMIC_MAGIC = 0xF00BABA8  # HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC, the first 4 bytes (native order)
STALE_PART_S = 3600  # an incomplete part this old lost its writer
ARCHIVE_SUFFIX = ".jsa"
PART_SUFFIX = ".part"
_UNSAFE_CHARS = (" ", "\t", "\n", "'", '"', "\\")  # spark-submit splits extraJavaOptions like a shell


def default_directory() -> str:
    """``$XDG_CACHE_HOME/statekit/spark-classes``, else ``~/.cache/statekit/spark-classes``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "statekit", "spark-classes")


def java_options(setting: str | None) -> list[str]:
    """The driver JVM's options for the conf value ``setting`` (None: the default).

    Publishes a complete recorded part first; returns the options that map the archive, or
    those that record one, or nothing (turned off, no ``java`` or Spark jars found, the
    directory not writable or not expressible in ``extraJavaOptions``)."""
    value = (setting or "true").strip()
    if value.lower() == "false":
        return []
    directory = default_directory() if value.lower() == "true" else os.path.abspath(os.path.expanduser(value))
    if any(c in directory for c in _UNSAFE_CHARS):
        return []
    key = fingerprint()
    if key is None:
        return []
    try:
        os.makedirs(directory, exist_ok=True)
        archive = published_archive(directory, key)
        if archive is None and not os.access(directory, os.W_OK):
            return []
    except OSError:
        return []
    common = ["-XX:+IgnoreUnrecognizedVMOptions", "-Xlog:cds*=off", "-Xshare:auto"]
    if archive is not None:
        return [*common, f"-XX:SharedArchiveFile={archive}"]
    part = os.path.join(directory, f"{key}.{os.getpid()}{PART_SUFFIX}")
    return [*common, f"-XX:ArchiveClassesAtExit={part}"]


def published_archive(directory: str, key: str) -> str | None:
    """The archive of fingerprint ``key`` in ``directory``, after publishing a complete part."""
    final = os.path.join(directory, key + ARCHIVE_SUFFIX)
    for name in sorted(os.listdir(directory)):
        if not (name.startswith(key + ".") and name.endswith(PART_SUFFIX)):
            continue
        part = os.path.join(directory, name)
        try:
            if _complete(part):
                if os.path.exists(final):
                    os.unlink(part)
                else:
                    os.replace(part, final)
            elif time.time() - os.stat(part).st_mtime > STALE_PART_S:
                os.unlink(part)
        except OSError:  # another session published or removed it first
            continue
    return final if os.path.isfile(final) else None


def _complete(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(4)
    return len(head) == 4 and int.from_bytes(head, sys.byteorder) == DYNAMIC_MAGIC


def fingerprint() -> str | None:
    """What the archive depends on, hashed; None when no ``java`` or no Spark jars are found."""
    java = _java()
    jars = _jars_dir()
    if java is None or jars is None:
        return None
    import pyspark

    digest = hashlib.sha256(f"pyspark {pyspark.__version__}\n".encode())
    java_home = os.path.dirname(os.path.dirname(java))
    for path in (java, os.path.join(java_home, "lib", "server", "libjvm.so")):
        digest.update(_stat_line(path))
    for name in sorted(os.listdir(jars)):
        digest.update(_stat_line(os.path.join(jars, name)))
    return digest.hexdigest()[:24]


def _stat_line(path: str) -> bytes:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path} -\n".encode()
    return f"{path} {st.st_size} {st.st_mtime_ns}\n".encode()


def _java() -> str | None:
    """The ``java`` spark-submit runs (its ``spark-class`` rule), resolved."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.isfile(java) else None


def _jars_dir() -> str | None:
    try:
        from pyspark.find_spark_home import _find_spark_home

        jars = os.path.join(_find_spark_home(), "jars")
    except (Exception, SystemExit):  # noqa: BLE001 - pyspark's lookup exits or raises when it finds no Spark
        return None
    return jars if os.path.isdir(jars) else None
