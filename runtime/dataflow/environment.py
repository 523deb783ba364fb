"""``StreamEnvironment``: where a job is defined, configured and executed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.checkpoint_config import CheckpointConfig, CheckpointingMode, ExternalizedCheckpointCleanup
from statekit.runtime.api.restart_strategy import RestartStrategy
from statekit.runtime.api.sources import Source
from statekit.runtime.api.watermarks import WatermarkStrategy
from statekit.runtime.connectors.sources import CollectionSource, FileSource, NumberSequenceSource
from statekit.runtime.dataflow.datastream import DataStream
from statekit.runtime.dataflow.executor import current_executor
from statekit.runtime.dataflow.graph import InputSpec, Transformation
from statekit.runtime.operators.base import StreamOperator
from statekit.runtime.operators.sources import SourceOperator
from statekit.runtime.state.backend import DEFAULT_STATE_BACKEND
from statekit.runtime.state.registry import state_backend
from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    from statekit.runtime.dataflow.job_handle import JobExecutionResult, JobHandle

__all__ = [
    "StreamEnvironment",
    "get_execution_environment",
]


def get_execution_environment() -> StreamEnvironment:
    """A new environment (the launcher's RunOptions apply when it executes)."""
    return StreamEnvironment()


class StreamEnvironment:
    """Defines a job (sources, operators, sinks), its configuration, and runs it."""

    def __init__(self) -> None:
        self.parallelism: int | None = None
        self.max_parallelism: int | None = None
        self.checkpoint_config = CheckpointConfig()
        self.state_backend = DEFAULT_STATE_BACKEND
        self.restart_strategy: RestartStrategy | None = None
        self.storage_options: dict[str, Any] | None = None
        self.trust_pickle = False
        self.incremental_checkpoints = False
        self.transformations: list[Transformation] = []

    @staticmethod
    def get_execution_environment() -> StreamEnvironment:
        """A new environment."""
        return StreamEnvironment()

    # ------------------------------------------------------------ configuration

    def set_parallelism(self, parallelism: int) -> StreamEnvironment:
        """Default parallelism of operators (``-p`` overrides it)."""
        if parallelism < 1:
            raise BadInputError(f"parallelism must be at least 1, got {parallelism}")
        self.parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self.parallelism or 1

    def set_max_parallelism(self, max_parallelism: int) -> StreamEnvironment:
        """Default max parallelism (number of key groups) of operators."""
        self.max_parallelism = max_parallelism
        return self

    def enable_checkpointing(
        self,
        interval_ms: int,
        *,
        min_pause_ms: int | None = None,
        timeout_ms: int | None = None,
        max_concurrent: int | None = None,
        tolerable_failed: int | None = None,
        num_retained: int | None = None,
        externalized_cleanup: ExternalizedCheckpointCleanup | str | None = None,
        checkpoint_storage: str | None = None,
        mode: CheckpointingMode | str | None = None,
    ) -> StreamEnvironment:
        """Take a checkpoint every ``interval_ms`` (other settings: see CheckpointConfig).

        ``mode``: ``exactly-once`` (default) or ``at-least-once`` (:class:`CheckpointingMode`).
        """
        config = self.checkpoint_config
        config.interval_ms = interval_ms
        if mode is not None:
            config.set_checkpointing_mode(mode)
        if min_pause_ms is not None:
            config.min_pause_ms = min_pause_ms
        if timeout_ms is not None:
            config.timeout_ms = timeout_ms
        if max_concurrent is not None:
            config.max_concurrent = max_concurrent
        if tolerable_failed is not None:
            config.tolerable_failed = tolerable_failed
        if num_retained is not None:
            config.num_retained = num_retained
        if externalized_cleanup is not None:
            config.externalized_cleanup = ExternalizedCheckpointCleanup(externalized_cleanup)
        if checkpoint_storage is not None:
            config.checkpoint_storage = checkpoint_storage
        config.validate()
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self.checkpoint_config

    def set_checkpoint_storage(self, url: str, storage_options: dict[str, Any] | None = None) -> StreamEnvironment:
        """Checkpoint directory URL (local path, ``file://``, ``s3://``...)."""
        self.checkpoint_config.checkpoint_storage = url
        if storage_options is not None:
            self.storage_options = storage_options
        return self

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> StreamEnvironment:
        """Unaligned (exactly-once) checkpoints: barriers overtake in-flight records, which are
        stored with the checkpoint (``get_checkpoint_config().set_aligned_checkpoint_timeout``
        makes them start aligned)."""
        self.checkpoint_config.enable_unaligned_checkpoints(enabled)
        return self

    def set_state_backend(self, name: str, *, incremental: bool | None = None) -> StreamEnvironment:
        """The keyed state backend: a name of ``statekit.runtime.state.registry.state_backend_names()``
        (``hashmap``, the default: dicts, asynchronous copy-on-write snapshots; ``rocksdb``).

        ``incremental``: checkpoints upload only what changed since the last one (a backend
        whose registry entry supports it; refused otherwise).
        """
        entry = state_backend(name)
        if incremental:
            entry.check_incremental()
        self.state_backend = entry.name
        if incremental is not None:
            self.incremental_checkpoints = incremental
        return self

    def enable_incremental_checkpointing(self, enabled: bool = True) -> StreamEnvironment:
        """Incremental checkpoints with the configured backend (checked when the job starts)."""
        self.incremental_checkpoints = enabled
        return self

    def set_restart_strategy(self, strategy: RestartStrategy) -> StreamEnvironment:
        """How the job restarts after a task failure (default: 3 attempts 1 s apart when
        checkpointing is enabled, none otherwise)."""
        self.restart_strategy = strategy
        return self

    # ------------------------------------------------------------ sources

    def add_transformation(
        self, kind: str, name: str, factory: Callable[[], StreamOperator], inputs: list[InputSpec],
        *, bounded: bool = True,
    ) -> Transformation:
        """Record an operator (API internal)."""
        for spec in inputs:
            if spec.upstream not in self.transformations:
                raise BadInputError("streams of different environments cannot be combined")
        t = Transformation(len(self.transformations), kind, name, factory, inputs, bounded=bounded,
                           timestamped=any(spec.upstream.timestamped for spec in inputs))
        self.transformations.append(t)
        return t

    def from_source(
        self, source: Source, name: str = "Source", watermark_strategy: WatermarkStrategy | None = None
    ) -> DataStream:
        """A stream read from ``source`` (FileSource, NumberSequenceSource, ...).

        ``watermark_strategy``: give records event timestamps and emit watermarks
        (:class:`~statekit.runtime.api.watermarks.WatermarkStrategy`).
        """
        from statekit.runtime.dataflow.datastream import copy_function

        t = self.add_transformation(
            "source", name, lambda: SourceOperator(copy_function(source), watermark_strategy), [],
            bounded=source.bounded,
        )
        t.timestamped = watermark_strategy is not None
        t.source = source
        return DataStream(self, [InputSpec(t)], t)

    add_source = from_source

    def from_collection(self, elements: Sequence[Any], name: str = "Collection Source") -> DataStream:
        """A bounded stream of in-memory elements."""
        return self.from_source(CollectionSource(elements), name)

    def from_sequence(self, start: int, end: int, name: str = "Sequence Source") -> DataStream:
        """The integers ``start..end`` inclusive."""
        return self.from_source(NumberSequenceSource(start, end), name)

    def read_text_files(self, directory: str, *, watch: bool = False, name: str = "File Source") -> DataStream:
        """Lines of the text files in ``directory`` (``watch``: keep reading new data)."""
        return self.from_source(FileSource(directory, watch=watch), name)

    # ------------------------------------------------------------ execution

    def execute(self, job_name: str = "statekit job") -> JobExecutionResult:
        """Run the job and block until it ends (launcher RunOptions apply).

        Raises:
            BadInputError: the job or its restore is invalid (e.g. snapshot state without a
                matching operator uid).
            JobFailedError: a task failed and restarts were exhausted.
        """
        return current_executor().execute(self, job_name)

    def execute_async(self, job_name: str = "statekit job") -> JobHandle:
        """Start the job and return its handle at once."""
        return current_executor().execute_async(self, job_name)

    def _check_sources(self) -> None:
        if not any(t.is_source for t in self.transformations):
            raise BadInputError("the job has no source; add one with env.from_source(...)")


