"""Options a launcher hands to the job script's ``env.execute()``.

Like Flink's ``ContextEnvironment``: ``statekit run`` (or
``statekit.runtime.control.launcher.run_job_file``) sets the :class:`RunOptions` before it runs
the user's job script, and the script's :meth:`StreamEnvironment.execute` picks them up. Job listeners
let job control (REST API, registry) observe each job as soon as it starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statekit.runtime.api.checkpoint_config import CheckpointConfig
    from statekit.runtime.dataflow.job_handle import JobHandle

DEFAULT_LATENCY_INTERVAL_MS = 200

__all__ = [
    "DEFAULT_LATENCY_INTERVAL_MS",
    "RunOptions",
    "set_run_options",
    "get_run_options",
    "add_job_listener",
    "remove_job_listener",
    "clear_job_listeners",
    "notify_job_listeners",
]


@dataclass(frozen=True)
class RunOptions:
    """What the command line overrides in a job.

    Attributes:
        parallelism: Default parallelism of the job (``-p``); overrides
            ``env.set_parallelism``.
        max_parallelism: Max parallelism (number of key groups) of the job.
        restore_path: Savepoint dir, checkpoint dir, or job checkpoint dir (= its latest
            complete checkpoint) to restore from (``-s``).
        allow_non_restored_state: Skip snapshot state of uids missing from the job.
        checkpoint_dir: Checkpoint storage URL; checkpoints go to
            ``<checkpoint_dir>/<job_id>/chk-N``.
        checkpoint_interval_ms: Enables periodic checkpoints at this interval.
        state_backend: Name of a registered keyed state backend
            (``statekit.runtime.state.registry.state_backend_names()``); overrides
            ``env.set_state_backend``.
        savepoint_on_finish: Directory: take a savepoint when a bounded job ends.
        savepoint_dir: The job's default savepoint directory (``--savepoint-dir``): where
            ``statekit savepoint JOB_ID`` and ``stop`` write without a directory of their own.
        job_id: Job id (32 lower-case hex chars), preassigned by the CLI or generated.
        job_args: The job script's own arguments (``sys.argv[1:]``).
        trust_pickle: Allow decoding pickle-serialized state of ``restore_path``
            (``--trust-pickle``); the job's own checkpoints are always trusted in-process.
        checkpointing_mode: ``exactly-once`` or ``at-least-once`` (``--checkpointing-mode``).
        unaligned: Unaligned checkpoints (``--unaligned``).
        aligned_checkpoint_timeout_ms: Start aligned, turn unaligned after this long
            (``--aligned-checkpoint-timeout``).
        incremental: Incremental checkpoints (``--incremental``; a backend that supports them).
        retained_checkpoints: Completed checkpoints kept (``--retained-checkpoints``).
        externalized_cleanup: ``retain_on_cancellation`` or ``delete_on_cancellation``
            (``--externalized-cleanup retain|delete``).
        checkpoint_timeout_ms: A checkpoint not complete after this long is aborted
            (``--checkpoint-timeout``).
        restore_mode: Who owns ``restore_path``: ``no-claim`` (default) or ``claim``
            (``--restore-mode``; :mod:`statekit.runtime.checkpoint.restore_mode`).
        metrics_port: Serve this process's Prometheus metrics on 127.0.0.1 at this fixed port too
            (``--metrics-port``; job control, not the job).
        executor: The registered executor that runs the job
            (:mod:`statekit.runtime.dataflow.executor`; None: the default, ``threads``; ``auto``:
            TaskManager processes when a vertex has more than one subtask, else threads).
        job_file: The job script being run (TaskManager processes import it to build the graph).
        task_managers: TaskManager processes (``--task-managers``; None: one per core).
        slots: Slots per TaskManager (``--slots``; None: enough for the job).
        buffer_timeout_ms: How long a record may wait in a network buffer before it is sent
            (``--buffer-timeout``; 0: sent at once; None: the default, 100 ms).
        buffer_size: Bytes of a network buffer (``--buffer-size``; None: 32 KiB).
        restart_attempts: Restarts after a failure (``--restart-attempts``; None: the job's strategy).
        restart_delay_ms: Delay between restarts (``--restart-delay``).
        latency_interval_ms: How often each source subtask sends a latency marker
            (``--latency-interval``; 0: never; None: :data:`DEFAULT_LATENCY_INTERVAL_MS`).
    """

    parallelism: int | None = None
    max_parallelism: int | None = None
    restore_path: str | None = None
    allow_non_restored_state: bool = False
    checkpoint_dir: str | None = None
    checkpoint_interval_ms: int | None = None
    state_backend: str | None = None
    savepoint_on_finish: str | None = None
    savepoint_dir: str | None = None
    job_id: str | None = None
    job_args: tuple[str, ...] = ()
    trust_pickle: bool = False
    checkpointing_mode: str | None = None
    unaligned: bool | None = None
    aligned_checkpoint_timeout_ms: int | None = None
    incremental: bool | None = None
    retained_checkpoints: int | None = None
    externalized_cleanup: str | None = None
    checkpoint_timeout_ms: int | None = None
    restore_mode: str = "no-claim"
    executor: str | None = None
    metrics_port: int | None = None
    job_file: str | None = None
    task_managers: int | None = None
    slots: int | None = None
    buffer_timeout_ms: int | None = None
    buffer_size: int | None = None
    restart_attempts: int | None = None
    restart_delay_ms: int | None = None
    latency_interval_ms: int | None = None

    @property
    def latency_interval(self) -> int | None:
        """The latency-marker interval in effect (None: no markers)."""
        interval = DEFAULT_LATENCY_INTERVAL_MS if self.latency_interval_ms is None else self.latency_interval_ms
        return interval or None

    def apply_to(self, config: CheckpointConfig) -> CheckpointConfig:
        """``config`` with these overrides set (the job's own settings elsewhere)."""
        if self.checkpoint_interval_ms is not None:
            config.interval_ms = self.checkpoint_interval_ms
        if self.checkpoint_dir:
            config.checkpoint_storage = self.checkpoint_dir
        if self.checkpointing_mode is not None:
            config.set_checkpointing_mode(self.checkpointing_mode)
        if self.unaligned is not None:
            config.unaligned = self.unaligned
        if self.aligned_checkpoint_timeout_ms is not None:
            config.aligned_checkpoint_timeout_ms = self.aligned_checkpoint_timeout_ms
        if self.retained_checkpoints is not None:
            config.num_retained = self.retained_checkpoints
        if self.externalized_cleanup is not None:
            config.set_externalized_checkpoint_cleanup(self.externalized_cleanup)
        if self.checkpoint_timeout_ms is not None:
            config.timeout_ms = self.checkpoint_timeout_ms
        if self.savepoint_dir is not None:
            config.default_savepoint_dir = self.savepoint_dir
        return config

    def checkpointing_argv(self) -> list[str]:
        """The checkpointing options as ``statekit run`` / launcher arguments."""
        argv: list[str] = []
        if self.checkpointing_mode is not None:
            argv += ["--checkpointing-mode", self.checkpointing_mode]
        if self.unaligned:
            argv.append("--unaligned")
        if self.aligned_checkpoint_timeout_ms is not None:
            argv += ["--aligned-checkpoint-timeout", f"{self.aligned_checkpoint_timeout_ms}ms"]
        if self.incremental:
            argv.append("--incremental")
        if self.retained_checkpoints is not None:
            argv += ["--retained-checkpoints", str(self.retained_checkpoints)]
        if self.externalized_cleanup is not None:
            argv += ["--externalized-cleanup", self.externalized_cleanup.split("_", 1)[0]]
        if self.checkpoint_timeout_ms is not None:
            argv += ["--checkpoint-timeout", f"{self.checkpoint_timeout_ms}ms"]
        return argv

    def check_checkpointing(self) -> None:
        """Refuse contradictory checkpointing options on their own (the job's settings are
        checked with them when it starts).

        Raises:
            BadInputError: e.g. ``--unaligned`` with at-least-once, an aligned checkpoint
                timeout without ``--unaligned``, ``--incremental`` with a backend that has no
                incremental checkpoints, fewer than one retained checkpoint, a timeout <= 0.
        """
        from statekit.runtime.api.checkpoint_config import CheckpointConfig, CheckpointingMode
        from statekit.statefmt.errors import BadInputError

        config = self.apply_to(CheckpointConfig())
        if self.unaligned and config.mode is CheckpointingMode.AT_LEAST_ONCE:
            raise BadInputError("--unaligned needs --checkpointing-mode exactly-once "
                                "(at-least-once never aligns, so there is nothing to overtake)")
        if self.aligned_checkpoint_timeout_ms and not self.unaligned:
            raise BadInputError("--aligned-checkpoint-timeout needs --unaligned "
                                "(it is when an aligned checkpoint turns unaligned)")
        config.validate()
        if self.incremental and self.state_backend is not None:
            from statekit.runtime.state.registry import state_backend

            state_backend(self.state_backend).check_incremental()


_lock = threading.Lock()
_options: RunOptions | None = None
_listeners: list[Callable[[JobHandle], None]] = []


def set_run_options(options: RunOptions | None) -> None:
    """Set (or clear with ``None``) the options the next ``execute()`` calls use."""
    global _options
    with _lock:
        _options = options


def get_run_options() -> RunOptions | None:
    """The options set by the launcher, or ``None`` when the script runs standalone."""
    with _lock:
        return _options


def add_job_listener(listener: Callable[[JobHandle], None]) -> None:
    """Call ``listener(handle)`` once per job start, inside ``execute()``, before records flow."""
    with _lock:
        _listeners.append(listener)


def remove_job_listener(listener: Callable[[JobHandle], None]) -> None:
    """Remove a listener added with :func:`add_job_listener` (no-op when absent)."""
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def clear_job_listeners() -> None:
    """Remove every job listener."""
    with _lock:
        _listeners.clear()


def notify_job_listeners(handle: JobHandle) -> None:
    """Call every registered listener with ``handle`` (runtime internal)."""
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(handle)
