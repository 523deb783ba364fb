"""The driver JVM's class archive (:mod:`statekit.spark.class_archive`): recorded by a session's
JVM as it exits, published by the next session, mapped by the ones after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekit.spark import class_archive
from statekit.spark.class_archive import DYNAMIC_MAGIC, STALE_PART_S, java_options
from statekit.spark.session import base_conf as _base_conf

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark")


def _option(options: list[str], name: str) -> str | None:
    return next((o.split("=", 1)[1] for o in options if o.startswith(f"-XX:{name}=")), None)


def _write_part(path: str, complete: bool) -> None:
    head = DYNAMIC_MAGIC.to_bytes(4, sys.byteorder) if complete else bytes(4)  # HotSpot writes the header last
    with open(path, "wb") as f:
        f.write(head + bytes(1024))


@pytest.fixture
def found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A java and a Spark jars directory of this test's own (the fingerprint's inputs)."""
    java = tmp_path / "jdk" / "bin" / "java"
    jars = tmp_path / "spark" / "jars"
    java.parent.mkdir(parents=True)
    jars.mkdir(parents=True)
    java.write_bytes(b"java")
    (jars / "spark-core.jar").write_bytes(b"jar")
    monkeypatch.setattr(class_archive, "_java", lambda: str(java))
    monkeypatch.setattr(class_archive, "_jars_dir", lambda: str(jars))
    return jars


def test_a_session_without_an_archive_records_one_and_a_complete_part_is_then_mapped(found: Path, tmp_path: Path) -> None:
    directory = str(tmp_path / "archives")
    first = java_options(directory)
    part = _option(first, "ArchiveClassesAtExit")
    assert part is not None and part.startswith(directory) and _option(first, "SharedArchiveFile") is None
    assert "-Xshare:auto" in first and "-XX:+IgnoreUnrecognizedVMOptions" in first
    _write_part(part, complete=True)
    second = java_options(directory)
    archive = _option(second, "SharedArchiveFile")
    assert archive == os.path.join(directory, f"{class_archive.fingerprint()}.jsa")
    assert _option(second, "ArchiveClassesAtExit") is None
    assert os.listdir(directory) == [os.path.basename(archive)]  # the part was renamed, not copied


def test_an_incomplete_part_is_kept_while_its_jvm_may_write_and_removed_when_stale(found: Path, tmp_path: Path) -> None:
    directory = str(tmp_path / "archives")
    part = _option(java_options(directory), "ArchiveClassesAtExit")
    assert part is not None
    _write_part(part, complete=False)
    assert _option(java_options(directory), "SharedArchiveFile") is None and os.path.exists(part)
    old = time.time() - STALE_PART_S - 60
    os.utime(part, (old, old))
    assert _option(java_options(directory), "SharedArchiveFile") is None
    assert not os.path.exists(part)


def test_a_later_complete_part_is_removed_once_an_archive_exists(found: Path, tmp_path: Path) -> None:
    directory = tmp_path / "archives"
    directory.mkdir()
    key = class_archive.fingerprint()
    for pid in (11, 12):
        _write_part(str(directory / f"{key}.{pid}.part"), complete=True)
    archive = _option(java_options(str(directory)), "SharedArchiveFile")
    assert archive is not None and sorted(os.listdir(directory)) == [f"{key}.jsa"]


def test_the_fingerprint_follows_the_jars_and_the_java(found: Path, tmp_path: Path) -> None:
    before = class_archive.fingerprint()
    (found / "spark-sql.jar").write_bytes(b"another jar")
    after = class_archive.fingerprint()
    assert before and after and before != after


def test_no_archive_when_turned_off_unfound_or_unsafe(found: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert java_options("false") == [] and java_options(" FALSE ") == []
    assert java_options(str(tmp_path / "with space")) == []  # spark-submit would split the option
    monkeypatch.setattr(class_archive, "_java", lambda: None)
    assert java_options(str(tmp_path / "archives")) == []


def test_the_driver_options_carry_the_quiet_log_and_the_archive(found: Path, tmp_path: Path) -> None:
    directory = str(tmp_path / "archives")
    quiet = _base_conf("local[2]", False, directory)["spark.driver.extraJavaOptions"].split()
    assert quiet[0].startswith("-Dlog4j.configurationFile=") and _option(quiet, "ArchiveClassesAtExit")
    verbose = _base_conf("local[2]", True, directory)["spark.driver.extraJavaOptions"].split()
    assert not any(o.startswith("-Dlog4j") for o in verbose) and _option(verbose, "ArchiveClassesAtExit")
    assert _base_conf("local[2]", False, "false")["spark.driver.extraJavaOptions"].split() == quiet[:1]
    assert "spark.driver.extraJavaOptions" not in _base_conf("local[2]", True, "false")


_SESSION = """
import json, sys
from statekit.spark.session import get_spark
spark = get_spark("local[1]", {"spark.statekit.classArchive": sys.argv[1]})
from pyspark import SparkContext
pid = SparkContext._gateway.proc.pid
with open(f"/proc/{pid}/maps", encoding="utf-8") as f:
    mapped = sorted({line.split()[-1] for line in f if line.rstrip().endswith(".jsa")
                     and line.split()[-1].startswith(sys.argv[1])})
print(json.dumps({"rows": spark.range(3).count(), "mapped": mapped}))
"""


def _session(directory: str) -> dict[str, object]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-c", _SESSION, directory], capture_output=True, text=True,
                          timeout=600, check=True, env=env)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_fresh_session_maps_the_archive_an_earlier_session_recorded(tmp_path: Path) -> None:
    directory = str(tmp_path / "archives")
    key = class_archive.fingerprint()
    assert key is not None
    first = _session(directory)
    assert first == {"rows": 3, "mapped": []}
    deadline = time.monotonic() + 600  # the first JVM writes its archive as it exits
    while not any(n.endswith(".part") and class_archive._complete(os.path.join(directory, n))
                  for n in os.listdir(directory)):
        assert time.monotonic() < deadline, f"no complete archive recorded in {directory}: {os.listdir(directory)}"
        time.sleep(1)
    second = _session(directory)
    assert second == {"rows": 3, "mapped": [os.path.join(directory, f"{key}.jsa")]}
