"""The Spark engine of ``statekit diff``: a full outer join per keyed state.

Same plan, same identity and the same counts as the local engine
(:mod:`statekit.readers.diff`): both sides are read through the ``statekit`` data source in
raw mode (stored bytes, expired entries included), joined on (key, namespace[, user key])
and classified by value bytes. Operator state is small and is compared on the driver.
Differences written with ``-o`` have the local engine's columns and JSON text; they are
decoded in the executors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from statekit.readers.diff import (
    DIFF_COLUMNS,
    DifferenceSink,
    DiffInputs,
    DiffSpec,
    SavepointDiff,
    StateDiff,
    StatePair,
    diff_arrow_schema,
    diff_operator_state,
)
from statekit.readers.diff.local import status_of
from statekit.readers.diff.plan import state_entries
from statekit.readers.progress import ProgressFactory, no_progress
from statekit.readers.savepoint_reader import SavepointReader
from statekit.spark.formats import write_table
from statekit.spark.session import OutputDir, SparkSettings, spark_errors
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.layout import hive_partition_dir
from statekit.statefmt.metadata import StateKind

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["diff_on_spark"]


def diff_on_spark(spec: DiffSpec, settings: SparkSettings, progress: ProgressFactory | None = None) -> SavepointDiff:
    """Diff savepoint ``spec.a`` (before) with ``spec.b`` (after) on Spark; ``spec.output``
    is written by Spark (Parquet, the local engine's columns)."""
    inputs = DiffInputs.open(spec)
    spark = settings.session()
    target = OutputDir.for_url(spark, spec.output, [spec.a, spec.b]) if spec.output else None
    job = _SparkDiff(spark, inputs, target)
    results: list[StateDiff] = []
    total = len(inputs.plan.pairs)
    with spark_errors(settings.verbose), (target.staged() if target else nullcontext("")) as staging:
        job.staging = staging
        with (progress or no_progress)(f"comparing {total} state(s)", total=total, unit="items") as advance:
            for pair in inputs.plan.pairs:
                results.append(job.diff_state(pair))
                advance(f"{pair.uid}/{pair.name}", 1)
    return SavepointDiff(inputs.a.path, inputs.b.path, "spark", inputs.plan.structural, tuple(results),
                         target.url if target else None)


class _SparkDiff:
    def __init__(self, spark: SparkSession, inputs: DiffInputs, target: OutputDir | None) -> None:
        self.spark, self.inputs = spark, inputs
        self.ra, self.rb = inputs.a, inputs.b
        self.keys, self.limit = inputs.spec.keys, inputs.spec.limit
        self.trust_pickle = inputs.spec.trust_pickle
        self.storage_options = inputs.spec.storage_options
        self.target = target
        self.staging = ""

    @property
    def decode(self) -> bool:
        return self.keys or self.target is not None

    def diff_state(self, pair: StatePair) -> StateDiff:
        kind = pair.descriptor.kind.value
        reason = pair.incomparable_reason()
        if reason is not None:
            return StateDiff(pair.uid, pair.name, kind, "incomparable", reason=reason)
        status = status_of(pair)
        if status != "compared" and not self.decode:
            return StateDiff(pair.uid, pair.name, kind, status, only_in_a=state_entries(self.ra, pair.op_a, pair.a),
                             only_in_b=state_entries(self.rb, pair.op_b, pair.b))
        if not pair.keyed:
            return self._operator_state(pair, status)
        return self._keyed_state(pair, status)

    # ------------------------------------------------------------ operator state (driver)

    def _operator_state(self, pair: StatePair, status: str) -> StateDiff:
        collected = _Collector()
        sink = None
        if self.decode:
            codec_a, codec_b = self.inputs.codecs(pair)
            sink = DifferenceSink(pair, codec_a, codec_b, limit=self.limit if self.keys else 0,
                                  writer=collected if self.target else None, max_parallelism=_max_p(pair))
        counts = diff_operator_state(self.ra if pair.a else None, self.rb if pair.b else None, pair, sink)
        if self.target is not None and collected.tables:
            import pyarrow as pa

            frame = self.spark.createDataFrame(pa.concat_tables(collected.tables).cast(diff_arrow_schema()))
            write_table(frame, self._target_dir(pair))
        return StateDiff(pair.uid, pair.name, pair.descriptor.kind.value, status, counts.only_in_a, counts.only_in_b,
                         counts.changed, counts.unchanged, examples=tuple(sink.examples) if sink else ())

    def _target_dir(self, pair: StatePair) -> str:
        assert self.target is not None
        return str(self.target.join(self.staging, hive_partition_dir(pair.uid, pair.name)))

    # ------------------------------------------------------------ keyed state (executors)

    def _frame(self, reader: SavepointReader, pair: StatePair, present: bool) -> DataFrame:
        from statekit.spark.source import RAW_SCHEMA, scan_state

        if not present:
            return self.spark.createDataFrame([], RAW_SCHEMA)
        frame: DataFrame = scan_state(self.spark, reader.path, pair.uid, pair.name,
                                      storage_options=self.storage_options,
                                      options={"raw": "true", "includeExpired": "true",
                                               "trustPickle": str(self.trust_pickle).lower()})
        return frame

    def _keyed_state(self, pair: StatePair, status: str) -> StateDiff:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        identity = ["key", "namespace", "user_key"] if pair.descriptor.kind is StateKind.MAP else ["key", "namespace"]
        left = self._frame(self.ra, pair, pair.a is not None).select(
            *identity, F.col("value").alias("value_a"), F.col("key_hash").alias("hash_a"))
        right = self._frame(self.rb, pair, pair.b is not None).select(
            *identity, F.col("value").alias("value_b"), F.col("key_hash").alias("hash_b"))
        change = (F.when(F.col("value_b").isNull(), "only_in_a").when(F.col("value_a").isNull(), "only_in_b")
                  .when(F.col("value_a") != F.col("value_b"), "changed").otherwise("unchanged"))
        joined = left.join(right, on=identity, how="full_outer").withColumn("change", change)
        if self.decode:
            joined = joined.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = {row["change"]: int(row["count"]) for row in joined.groupBy("change").count().collect()}
            examples: tuple[Any, ...] = ()
            if self.decode:
                differences = joined.filter(F.col("change") != "unchanged")
                if "user_key" not in identity:
                    differences = differences.withColumn("user_key", F.lit(None).cast("binary"))
                differences = differences.withColumn("key_hash", F.coalesce("hash_a", "hash_b")).select(
                    "change", "key", "namespace", "user_key", "value_a", "value_b", "key_hash")
                examples = self._examples(pair, differences)
                if self.target is not None:
                    self._write(pair, differences)
        finally:
            if self.decode:
                joined.unpersist()
        return StateDiff(pair.uid, pair.name, pair.descriptor.kind.value, status,
                         counts.get("only_in_a", 0), counts.get("only_in_b", 0), counts.get("changed", 0),
                         counts.get("unchanged", 0), examples=examples)

    def _examples(self, pair: StatePair, differences: DataFrame) -> tuple[Any, ...]:
        if not self.keys or self.limit == 0:
            return ()
        table = differences.limit(self.limit).toArrow()
        codec_a, codec_b = self.inputs.codecs(pair)
        sink = DifferenceSink(pair, codec_a, codec_b, limit=self.limit, writer=None, max_parallelism=_max_p(pair))
        sink.add(table)
        return tuple(sink.examples)

    def _write(self, pair: StatePair, differences: DataFrame) -> None:
        schema = ", ".join(f"{c} string" for c in DIFF_COLUMNS[:-1]) + ", key_group int"
        from statekit.spark.session import map_in_arrow

        decoded = map_in_arrow(differences, _JsonRows(pair, self.trust_pickle, _max_p(pair)), schema)
        write_table(decoded, self._target_dir(pair))


def _max_p(pair: StatePair) -> int:
    op = pair.op_a or pair.op_b
    assert op is not None
    return int(op.max_parallelism)


class _Collector:
    """A :class:`statekit.readers.diff.DifferenceWriter` that keeps the tables it is given."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []

    def write_table(self, table: pa.Table) -> None:
        self.tables.append(table)


class _JsonRows:
    """Executor side of ``-o``: binary difference rows -> the JSON text columns of the local engine."""

    def __init__(self, pair: StatePair, trust_pickle: bool, max_parallelism: int) -> None:
        self.pair = pair
        self.trust_pickle = trust_pickle
        self.max_parallelism = max_parallelism

    def _codec(self, side: str) -> StateCodec | None:
        descriptor = self.pair.a if side == "a" else self.pair.b
        op = self.pair.op_a if side == "a" else self.pair.op_b
        if descriptor is None or op is None:
            return None
        return StateCodec(descriptor, op.key_serializer, trust_pickle=self.trust_pickle)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        collected = _Collector()
        sink = DifferenceSink(self.pair, self._codec("a"), self._codec("b"), limit=0, writer=collected,
                              max_parallelism=self.max_parallelism)
        for batch in batches:
            sink.add(pa.Table.from_batches([batch]))
            for table in collected.tables:
                yield from table.cast(diff_arrow_schema()).to_batches()
            collected.tables.clear()
