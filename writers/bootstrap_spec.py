"""What one ``bootstrap`` writes: :class:`BootstrapSpec`, validated once when it is made, and
:class:`BootstrapPlan`, the spec resolved against its input schema and key groups.

Both engines (the local one in :mod:`statekit.writers.bootstrap`, the Spark one in
``statekit.spark.bootstrap``) take a spec, resolve it to a plan
(:func:`statekit.writers.row_encoding.plan_bootstrap`) and write what the plan says, so they
write the same state files for the same rows. How an engine runs (batch size, memory,
Spark master) is not part of the spec.

Row semantics per kind:

* ``value`` / ``reducing`` / ``aggregating``: one entry per (key, namespace); a later row for
  the same key replaces an earlier one.
* ``list``: a list-typed value column gives the whole list per row (the last row wins);
  any other value column gives one element per row, and the rows of one key are appended
  in input order.
* ``map``: one entry per (key, namespace, user key); the last row wins.
* ``operator-list`` / ``union``: one element per row, in input order, split evenly over the
  subtasks (union: restore gives every subtask all of them).
* ``broadcast``: one map entry per row (user key -> value), copied to every subtask.

Several ``value_columns`` make a struct value (``struct<a:T,b:U>``). The declared type
defaults to what the Arrow schema says; a declared primitive type casts the column.
"Last" and "in input order" hold on the local engine; Spark has no input order, so there
one of the rows of a key is kept (see ``statekit.spark.bootstrap``).
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import (
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    check_parallelism,
    compute_key_group_range_for_operator_index,
)
from statekit.statefmt.metadata import CheckpointMetadata, OperatorMetadata, StateDescriptor, StateFile, StateKind
from statekit.statefmt.native_state import NO_EXPIRY
from statekit.statefmt.serializers import get_serializer
from statekit.statefmt.value_types import parse_value_type
from statekit.writers.key_group_sorter import DuplicateMode
from statekit.writers.metadata_builder import SnapshotMetadataBuilder, operator_metadata

__all__ = ["INPUT_FORMATS", "BootstrapSpec", "BootstrapPlan", "format_from_name", "parse_state_kind"]

INPUT_FORMATS = ("parquet", "csv", "json")
# the latest expiry an entry can have: expiries are int64 milliseconds, and 2**63 - 1 means "never"
MAX_EXPIRY_MS = NO_EXPIRY - 1
_EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json",
               ".jsonl": "json", ".ndjson": "json"}


def parse_state_kind(kind: str | StateKind) -> StateKind:
    """The state kind named ``kind`` (``value``, ``map``, ``operator-list``, ...)."""
    try:
        return StateKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in StateKind)
        raise BadInputError(f"--kind {kind!r}: unknown state kind (kinds: {known})") from None


def format_from_name(path: str) -> str | None:
    """The input format a file name says (``.parquet``, ``.csv``, ``.jsonl``, ...), if any."""
    return _EXTENSIONS.get(posixpath.splitext(path)[1].lower())


@dataclass(frozen=True)
class BootstrapSpec:
    """One operator state to bootstrap from rows, and where the savepoint goes.

    Making a spec validates everything that needs no I/O (a :class:`BadInputError` with a
    one-line message otherwise); what needs the input or ``from_savepoint`` is checked when
    an engine resolves the spec (:func:`statekit.writers.row_encoding.plan_bootstrap`).

    Attributes:
        inputs: files or directories of Parquet, CSV or JSON-lines rows (local or fsspec URLs;
            kept as a tuple, as ``value_columns``).
        output: the new savepoint directory (must not exist or be empty).
        uid, state: the operator and its state's name.
        value_columns: the value; several columns make a struct value.
        kind: the state kind (a kind's name is accepted too).
        key_column: the key (keyed kinds only).
        user_key_column: the map key (map and broadcast state only).
        namespace_column: the namespace, e.g. a window (keyed kinds only).
        input_format: ``parquet``, ``csv`` or ``json`` (default: from the file names).
        value_type, user_key_type: declared types (default: from the input schema).
        key_serializer, value_serializer, user_key_serializer: serializer names.
        parallelism: subtasks of the operator.
        max_parallelism: key groups (default: ``from_savepoint``'s operators', or the
            default for ``parallelism``).
        name: the operator's name (default: the uid).
        ttl_ms: the state TTL: recorded in the descriptor, and every entry expires at
            ``ttl_reference_time_ms + ttl_ms`` (keyed state only).
        ttl_reference_time_ms: the time (epoch ms) entries count as written at; default:
            the wall clock when the spec is made (then stored here, so every engine and
            subtask uses the same).
        from_savepoint: copy this savepoint's operators into the output and add the new one.
        storage_options, output_storage_options: fsspec options of the inputs and
            ``from_savepoint``, and of the output.
    """

    inputs: Sequence[str]
    output: str
    uid: str
    state: str
    value_columns: Sequence[str]
    kind: StateKind = StateKind.VALUE
    key_column: str | None = None
    user_key_column: str | None = None
    namespace_column: str | None = None
    input_format: str | None = None
    value_type: str | None = None
    user_key_type: str | None = None
    key_serializer: str = "msgpack"
    value_serializer: str = "msgpack"
    user_key_serializer: str = "msgpack"
    parallelism: int = 1
    max_parallelism: int | None = None
    name: str | None = None
    ttl_ms: int | None = None
    ttl_reference_time_ms: int | None = None
    from_savepoint: str | None = None
    storage_options: dict[str, Any] | None = field(default=None, hash=False)
    output_storage_options: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", parse_state_kind(self.kind))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "value_columns", tuple(self.value_columns))
        self._check_names()
        self._check_columns()
        self._check_encoding()
        self._check_operator()

    @property
    def sources(self) -> tuple[str, ...]:
        """Everything the bootstrap reads: the inputs and ``from_savepoint`` (the output lies outside them)."""
        return (*self.inputs, *([self.from_savepoint] if self.from_savepoint else []))

    def _check_names(self) -> None:
        if not self.inputs:
            raise BadInputError("give --input (a file or a directory of Parquet, CSV or JSON-lines files)")
        if self.input_format is not None and self.input_format not in INPUT_FORMATS:
            raise BadInputError(f"--input-format {self.input_format!r}: expected one of {', '.join(INPUT_FORMATS)}")
        if not self.uid or not self.state:
            raise BadInputError("--uid and --state must not be empty")
        if not self.output:
            raise BadInputError("give the output directory (-o OUT)")

    def _check_columns(self) -> None:
        kind = self.kind
        if not self.value_columns:
            raise BadInputError("give at least one --value-column")
        if kind.keyed and not self.key_column:
            raise BadInputError(f"{kind.value} state is keyed: give --key-column")
        if not kind.keyed and (self.key_column or self.namespace_column):
            raise BadInputError(f"{kind.value} state is operator state (not keyed): drop --key-column/--namespace-column")
        if self.namespace_column and self.ttl_ms is not None:
            raise BadInputError("namespaced state (--namespace-column) cannot have a TTL: drop --ttl-ms")
        if kind.has_user_key and not self.user_key_column:
            raise BadInputError(f"{kind.value} state needs --user-key-column (the map key)")
        if not kind.has_user_key and self.user_key_column:
            raise BadInputError(f"--user-key-column is only for map and broadcast state, not {kind.value}")

    def _check_encoding(self) -> None:
        for serializer in (self.key_serializer, self.value_serializer, self.user_key_serializer):
            get_serializer(serializer, for_write=True)
        for declared in (self.value_type, self.user_key_type):
            if declared is not None:
                parse_value_type(declared)

    def _check_operator(self) -> None:
        if self.ttl_ms is not None and self.ttl_ms <= 0:
            raise BadInputError(f"--ttl-ms {self.ttl_ms}: a TTL must be positive (milliseconds)")
        if self.ttl_ms is None and self.ttl_reference_time_ms is not None:
            raise BadInputError("--ttl-reference-time is only meaningful with --ttl-ms")
        if self.ttl_ms is not None and not self.kind.keyed:
            raise BadInputError(f"--ttl-ms: a TTL applies to keyed state only, not {self.kind.value} state")
        if self.ttl_reference_time_ms is not None and self.ttl_reference_time_ms < 0:
            raise BadInputError(f"--ttl-reference-time {self.ttl_reference_time_ms}: expected epoch milliseconds >= 0")
        if self.ttl_ms is not None and self.ttl_reference_time_ms is None:
            object.__setattr__(self, "ttl_reference_time_ms", time.time_ns() // 1_000_000)
        if self.ttl_ms is not None and self.ttl_reference_time_ms is not None \
                and self.ttl_reference_time_ms + self.ttl_ms > MAX_EXPIRY_MS:
            raise BadInputError(f"--ttl-ms {self.ttl_ms}: entries would expire after the latest time an expiry "
                                f"holds ({MAX_EXPIRY_MS} ms after the epoch, with --ttl-reference-time "
                                f"{self.ttl_reference_time_ms})")
        self.check_parallelism(UPPER_BOUND_MAX_PARALLELISM if self.max_parallelism is None else self.max_parallelism)

    def check_parallelism(self, max_parallelism: int) -> None:
        """Raise unless the operator's parallelism fits ``max_parallelism`` key groups."""
        try:
            check_parallelism(self.parallelism, max_parallelism)
        except BadInputError as exc:
            raise BadInputError(f"operator {self.uid!r}: {exc}") from None

    @property
    def expiry_ms(self) -> int | None:
        """When every bootstrapped entry expires (epoch ms), or None without a TTL."""
        if self.ttl_ms is None:
            return None
        assert self.ttl_reference_time_ms is not None
        return self.ttl_reference_time_ms + self.ttl_ms

    @property
    def operator_name(self) -> str:
        return self.name or self.uid

    @property
    def columns(self) -> list[str]:
        """The input columns read, each once: key, namespace, user key, values."""
        named = [self.key_column, self.namespace_column, self.user_key_column, *self.value_columns]
        return list(dict.fromkeys(c for c in named if c))

    def format_of(self, path: str) -> str:
        """The input format of the file ``path``: ``input_format``, else what its name says."""
        fmt = self.input_format or format_from_name(path)
        if fmt is None:
            raise BadInputError(f"cannot tell the format of {path} from its name; pass --input-format parquet|csv|json")
        return fmt


@dataclass(frozen=True)
class BootstrapPlan:
    """A spec resolved against its input schema and its key groups: what every engine writes.

    Attributes:
        spec: the spec.
        descriptor: the state descriptor, declared types filled in from the input schema.
        max_parallelism: the key groups of the new operator.
        list_per_row: a list state whose value column holds whole lists (the last row of a
            key wins); otherwise each row of a list state is one element, appended in order.
    """

    spec: BootstrapSpec
    descriptor: StateDescriptor
    max_parallelism: int
    list_per_row: bool = False

    @property
    def kind(self) -> StateKind:
        return self.spec.kind

    @property
    def parallelism(self) -> int:
        return self.spec.parallelism

    @property
    def key_serializer(self) -> str | None:
        return self.spec.key_serializer if self.kind.keyed else None

    @property
    def duplicates(self) -> DuplicateMode:
        """How entries of one key (and namespace, user key) merge: a list state appends rows, the rest keep the last."""
        return DuplicateMode.CONCAT_LISTS if self.kind is StateKind.LIST and not self.list_per_row else DuplicateMode.LAST

    def key_group_range(self, index: int) -> KeyGroupRange:
        return compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, index)

    def file_path(self, index: int) -> str:
        """Subtask ``index``'s state file, relative to the savepoint directory."""
        return layout.state_file_path(self.spec.uid, self.descriptor.name, index, self.parallelism)

    def operator(self, files: Sequence[StateFile]) -> OperatorMetadata:
        """The new operator's metadata; ``files[i]`` is subtask ``i``'s state file."""
        return operator_metadata(
            self.spec.uid, name=self.spec.operator_name, parallelism=self.parallelism,
            max_parallelism=self.max_parallelism, key_serializer=self.key_serializer, states=[self.descriptor],
            files=[(f,) for f in files],
        )

    def metadata(self, source: CheckpointMetadata | None, copied: Sequence[OperatorMetadata],
                 files: Sequence[StateFile]) -> CheckpointMetadata:
        """The savepoint's metadata: ``source``'s job (or a new one), its ``copied`` operators, then the new one."""
        bootstrapped = {"statekit.bootstrapped": f"{self.spec.uid}/{self.spec.state}"}
        header = SnapshotMetadataBuilder.continuing(source, bootstrapped)
        return header.build([*copied, self.operator(files)])
