"""Checkpoint settings of a job (Flink's ``CheckpointConfig``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from statekit.statefmt.errors import BadInputError

__all__ = [
    "CheckpointConfig",
    "CheckpointingMode",
    "ExternalizedCheckpointCleanup",
    "Alignment",
]


class CheckpointingMode(str, Enum):
    """Flink's checkpointing modes.

    ``EXACTLY_ONCE``: barriers are aligned (or unaligned, with in-flight records stored), so a
    restore replays every record exactly once into the state. ``AT_LEAST_ONCE``: channels are
    never blocked; after a restore, records that arrived behind an early barrier are applied
    again (never lost, possibly twice).
    """

    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"

    @classmethod
    def parse(cls, value: CheckpointingMode | str) -> CheckpointingMode:
        """A mode from itself or its name (``exactly-once``, ``EXACTLY_ONCE``, ...)."""
        if isinstance(value, CheckpointingMode):
            return value
        text = str(value).strip().lower().replace("_", "-")
        for mode in cls:
            if mode.value == text:
                return mode
        raise BadInputError(f"unknown checkpointing mode {value!r}; use exactly-once or at-least-once")


class ExternalizedCheckpointCleanup(str, Enum):
    """What happens to retained checkpoints when the job is cancelled.

    Checkpoints are always kept when the job fails or is killed (so it can be restored),
    and when it finishes (statekit keeps them for inspection).
    """

    RETAIN_ON_CANCELLATION = "retain_on_cancellation"
    DELETE_ON_CANCELLATION = "delete_on_cancellation"


@dataclass
class CheckpointConfig:
    """Checkpointing of one job.

    Attributes:
        interval_ms: Trigger period; None or <= 0 disables periodic checkpoints.
        min_pause_ms: Minimum time between the end of one checkpoint and the next trigger.
        timeout_ms: A checkpoint not complete after this long is aborted.
        max_concurrent: Periodic checkpoints in flight at once.
        tolerable_failed: Consecutive failed checkpoints tolerated before the job fails.
        num_retained: Completed checkpoints kept; older ones are disposed.
        externalized_cleanup: Retention on cancellation.
        checkpoint_storage: Checkpoint directory URL (``<dir>/<job_id>/chk-N``).
        default_savepoint_dir: Target of savepoints triggered without a directory.
        mode: Exactly-once (default) or at-least-once.
        unaligned: Exactly-once checkpoints whose barriers overtake in-flight records, which
            are stored with the checkpoint (savepoints stay aligned).
        aligned_checkpoint_timeout_ms: With ``unaligned``: checkpoints start aligned and turn
            unaligned once this long passed since the trigger; 0 starts them unaligned.
        channel_state_serializer: How in-flight records are stored: ``records`` (safe msgpack,
            tuples kept) or ``pickle`` (any picklable record; reading needs trust).
    """

    interval_ms: int | None = None
    min_pause_ms: int = 0
    timeout_ms: int = 600_000
    max_concurrent: int = 1
    tolerable_failed: int = 0
    num_retained: int = 1
    externalized_cleanup: ExternalizedCheckpointCleanup = ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    checkpoint_storage: str | None = None
    default_savepoint_dir: str | None = None
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    unaligned: bool = False
    aligned_checkpoint_timeout_ms: int = 0
    channel_state_serializer: str = "records"

    @property
    def enabled(self) -> bool:
        """Whether periodic checkpoints are on."""
        return self.interval_ms is not None and self.interval_ms > 0

    def set_checkpoint_interval(self, interval_ms: int) -> CheckpointConfig:
        self.interval_ms = interval_ms
        return self

    def set_min_pause_between_checkpoints(self, min_pause_ms: int) -> CheckpointConfig:
        self.min_pause_ms = min_pause_ms
        return self

    def set_checkpoint_timeout(self, timeout_ms: int) -> CheckpointConfig:
        self.timeout_ms = timeout_ms
        return self

    def set_max_concurrent_checkpoints(self, max_concurrent: int) -> CheckpointConfig:
        self.max_concurrent = max_concurrent
        return self

    def set_tolerable_checkpoint_failure_number(self, number: int) -> CheckpointConfig:
        self.tolerable_failed = number
        return self

    def set_num_retained_checkpoints(self, number: int) -> CheckpointConfig:
        self.num_retained = number
        return self

    def set_externalized_checkpoint_cleanup(self, cleanup: ExternalizedCheckpointCleanup | str) -> CheckpointConfig:
        self.externalized_cleanup = ExternalizedCheckpointCleanup(cleanup)
        return self

    def set_checkpoint_storage(self, url: str) -> CheckpointConfig:
        self.checkpoint_storage = url
        return self

    def set_default_savepoint_dir(self, url: str) -> CheckpointConfig:
        self.default_savepoint_dir = url
        return self

    def set_checkpointing_mode(self, mode: CheckpointingMode | str) -> CheckpointConfig:
        self.mode = CheckpointingMode.parse(mode)
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self.mode

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> CheckpointConfig:
        self.unaligned = enabled
        return self

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self.unaligned

    def set_aligned_checkpoint_timeout(self, timeout_ms: int) -> CheckpointConfig:
        self.aligned_checkpoint_timeout_ms = timeout_ms
        return self

    def set_channel_state_serializer(self, name: str) -> CheckpointConfig:
        self.channel_state_serializer = name
        return self

    def validate(self) -> None:
        """Raise BadInputError for settings that cannot work."""
        if self.min_pause_ms < 0 or self.timeout_ms <= 0:
            raise BadInputError("checkpoint min pause must be >= 0 and timeout > 0")
        if self.max_concurrent < 1:
            raise BadInputError(f"max concurrent checkpoints must be >= 1, got {self.max_concurrent}")
        if self.tolerable_failed < 0:
            raise BadInputError("tolerable failed checkpoints must be >= 0")
        if self.num_retained < 1:
            raise BadInputError(f"retained checkpoints must be >= 1, got {self.num_retained}")
        if self.unaligned and self.mode is CheckpointingMode.AT_LEAST_ONCE:
            raise BadInputError("unaligned checkpoints need the exactly-once checkpointing mode "
                                "(at-least-once never aligns, so there is nothing to overtake)")
        if self.unaligned and self.max_concurrent > 1:
            raise BadInputError(f"unaligned checkpoints cannot run concurrently; max concurrent checkpoints "
                                f"must be 1, got {self.max_concurrent}")
        if self.aligned_checkpoint_timeout_ms < 0:
            raise BadInputError(f"aligned checkpoint timeout must be >= 0, got {self.aligned_checkpoint_timeout_ms} ms")
        if self.aligned_checkpoint_timeout_ms and not self.unaligned:
            raise BadInputError("an aligned checkpoint timeout needs unaligned checkpoints "
                                "(it is when an aligned checkpoint turns unaligned)")
        if self.channel_state_serializer not in ("records", "pickle"):
            raise BadInputError(f"unknown channel state serializer {self.channel_state_serializer!r}; "
                                "use records or pickle")

    def barrier_alignment(self) -> tuple[Alignment, int | None]:
        """How periodic checkpoint barriers travel: (alignment, aligned timeout in ms or None)."""
        if self.mode is CheckpointingMode.AT_LEAST_ONCE:
            return Alignment.AT_LEAST_ONCE, None
        if not self.unaligned:
            return Alignment.ALIGNED, None
        if self.aligned_checkpoint_timeout_ms > 0:
            return Alignment.ALIGNED, self.aligned_checkpoint_timeout_ms
        return Alignment.UNALIGNED, None


class Alignment(str, Enum):
    """How the barriers of one checkpoint travel and are handled.

    ``ALIGNED``: in-band; a task with several inputs blocks the channels that delivered the
    barrier until all did (exactly-once; also every savepoint). ``UNALIGNED``: the barrier
    overtakes in-flight data (priority lane), which is stored as channel state (exactly-once).
    ``AT_LEAST_ONCE``: in-band, never blocking; a task snapshots when the last barrier arrived.
    """

    ALIGNED = "aligned"
    UNALIGNED = "unaligned"
    AT_LEAST_ONCE = "at-least-once"


