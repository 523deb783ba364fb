"""What the Flink SQL fixture jobs share (they run under PyFlink's Python; this directory is on
``sys.path`` because the job file is in it): the MiniCluster's configuration, the latest retained
checkpoint of a job, and waiting for a condition."""

from __future__ import annotations

import glob
import time
from collections.abc import Callable, Mapping

from pyflink.common import Configuration


def minicluster_configuration(out: str, backend: str, extra: Mapping[str, str]) -> Configuration:
    """A local MiniCluster checkpointing every second into ``out``/checkpoints (savepoints into
    ``out``/savepoints) on ``backend`` (incremental on RocksDB), on 127.0.0.1, 4 slots, SQL at
    parallelism 2 and max parallelism 128 in UTC; then ``extra``."""
    conf = Configuration()
    settings = {
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.dir": f"file://{out}/checkpoints",
        "execution.checkpointing.savepoint-dir": f"file://{out}/savepoints",
        "state.backend.type": backend,
        "execution.checkpointing.incremental": str(backend == "rocksdb").lower(),
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "taskmanager.numberOfTaskSlots": "4",
        "table.local-time-zone": "UTC",
        "table.exec.resource.default-parallelism": "2",
        "pipeline.max-parallelism": "128",
        **extra,
    }
    for key, value in settings.items():
        conf.set_string(key, value)
    return conf


def latest_checkpoint(out: str, job_id: str) -> int:
    """The id of the newest checkpoint of ``job_id`` with a ``_metadata`` under ``out``, else 0."""
    found = [int(p.split("chk-")[1].split("/")[0]) for p in glob.glob(f"{out}/checkpoints/{job_id}/chk-*/_metadata")]
    return max(found, default=0)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    """Poll ``predicate`` every 0.2 s; exit naming ``what`` after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)
