"""``bootstrap --format flink``: a canonical Apache Flink savepoint from Parquet, CSV or JSON rows.

What to write is a :class:`FlinkBootstrapSpec`: operators (uid, parallelism, max
parallelism, key type, Java or PyFlink layout), each with keyed states read from rows
(:class:`FlinkStateSpec`: kind, columns, declared Flink types). It comes from the command
line (one operator, one state) or from a spec file (:func:`load_spec_file`, JSON or TOML:
several operators and states). Each state is laid out as a Flink job declares it
(:mod:`statekit.flink.state_layout`), types as :mod:`statekit.flink.type_info` parses them.

Row semantics per kind (as statekit's own bootstrap, :mod:`statekit.writers.bootstrap_spec`):

* ``value`` / ``reducing`` / ``aggregating``: one entry per key (and window); a later row
  for the same key replaces an earlier one.
* ``list``: a list column gives the whole list per row (the last row wins); any other column
  gives one element per row, appended in input order.
* ``map``: one entry per (key, map key); the last row wins.
* ``event-timers`` / ``processing-timers``: one timer per row (the value column is its
  timestamp, epoch ms); equal timers are one.

Several value columns make a ``row`` value. A state's types default to what the input
schema says (``int64`` -> ``long``, ``string`` -> ``string``, ``struct`` -> ``row``...): declare
them when the job's differ, since Flink restores only compatible serializers.

The local engine (:func:`bootstrap_flink_savepoint`) reads the input batch by batch, encodes
each row, sorts the entries by key group with bounded memory
(:class:`statekit.flink.entry_sorter.EntrySorter`) and writes one stream per subtask, then
``_metadata``; the Spark engine (``statekit.spark.flink_bootstrap``) shares the plan
(:func:`plan_operator`) and the encoding (:class:`RowEncoder`).
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from statekit.flink.entry_sorter import DEFAULT_MEMORY_BUDGET, EntrySorter, entries_table
from statekit.flink.key_hash import KeyHasher, key_hasher
from statekit.flink.keygroups import flink_murmur_hash
from statekit.flink.savepoint_metadata import DEFAULT_METADATA_VERSION, NewOperator, check_metadata_version
from statekit.flink.savepoint_writer import WrittenSubtask, publish_savepoint, write_subtask_stream
from statekit.flink.state_layout import STATE_KINDS, TIMER_KINDS, KeyLayout, StateLayout
from statekit.flink.state_meta_writer import encode_keyed_backend_meta
from statekit.flink.type_info import FlinkType, parse_flink_type
from statekit.flink.uids import operator_id_for_uid
from statekit.readers.progress import ProgressFactory, no_progress
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.keygroups import (
    check_parallelism,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
)
from statekit.writers.bootstrap import RowFiles, RowInput, open_rows
from statekit.writers.staging import staged_output_dir

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FlinkStateSpec", "FlinkOperatorSpec", "FlinkBootstrapSpec", "FlinkBootstrapReport", "OperatorPlan",
           "StatePlan", "RowEncoder", "plan_operator", "bootstrap_flink_savepoint", "load_spec_file",
           "flink_type_of_arrow"]

INPUT_FORMATS = ("parquet", "csv", "json")


# ----------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class FlinkStateSpec:
    """One keyed state of an operator, read from rows.

    Attributes:
        name: The state name the job declares (PyFlink: the Python name, without ``python-state-``).
        kind: ``value``, ``list``, ``map``, ``reducing``, ``aggregating``, ``event-timers`` or
            ``processing-timers``.
        value_columns: The value (several make a row); for timers the timestamp column.
        inputs: The rows (default: the operator's inputs).
        input_format: ``parquet``, ``csv`` or ``json`` (default: the operator's, else from names).
        key_column: The key (default: the operator's).
        user_key_column: The map key (map state).
        namespace_column: A window ``(start, end)`` per row (``TimeWindow`` namespace), if any.
        value_type: The Flink type of the value (list: of an element); default from the schema.
        user_key_type: The Flink type of the map key; default from the schema.
        ttl_timestamp: Last-access time (epoch ms) of state with a time-to-live; ``None`` without.
        timer_service: The timer service of timers (``user-timers``: a process function's).
    """

    name: str
    kind: str = "value"
    value_columns: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    input_format: str | None = None
    key_column: str | None = None
    user_key_column: str | None = None
    namespace_column: str | None = None
    value_type: str | None = None
    user_key_type: str | None = None
    ttl_timestamp: int | None = None
    timer_service: str = "user-timers"

    def __post_init__(self) -> None:
        object.__setattr__(self, "value_columns", tuple(self.value_columns))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if not self.name:
            raise BadInputError("a state needs a name (--state)")
        if self.kind not in STATE_KINDS + TIMER_KINDS:
            raise BadInputError(f"state {self.name!r}: --kind {self.kind!r} is not one of "
                                f"{', '.join(STATE_KINDS + TIMER_KINDS)}")
        if not self.value_columns:
            raise BadInputError(f"state {self.name!r}: give a --value-column (timers: the timestamp column)")
        if (self.kind == "map") != (self.user_key_column is not None):
            raise BadInputError(f"state {self.name!r}: map state needs --user-key-column, and only map state has one")
        if self.input_format is not None and self.input_format not in INPUT_FORMATS:
            raise BadInputError(f"--input-format {self.input_format!r}: expected one of {', '.join(INPUT_FORMATS)}")
        if self.kind in TIMER_KINDS and len(self.value_columns) != 1:
            raise BadInputError(f"timers {self.name!r}: one --value-column, the timestamp (epoch ms)")
        for declared in (self.value_type, self.user_key_type):
            if declared is not None:
                parse_flink_type(declared)

    @property
    def columns(self) -> list[str]:
        named = [self.key_column, self.namespace_column, self.user_key_column, *self.value_columns]
        return list(dict.fromkeys(c for c in named if c))


@dataclass(frozen=True)
class FlinkOperatorSpec:
    """One keyed operator of the new savepoint.

    Attributes:
        uid: The operator's uid (the job's ``.uid(...)``); its operator id is Flink's hash of it.
        states: Its keyed states.
        key_type: The Flink type of the key (default: from the key column of the first state).
        pyflink: Lay the states out as PyFlink registers a Python function's state.
        parallelism: Subtasks in the savepoint (Flink redistributes state up to the max parallelism).
        max_parallelism: Key groups (default: Flink's default for ``parallelism``, at least 128);
            the restoring job must have this max parallelism, or none set.
        name: The operator name recorded from metadata v5 (default: the uid).
        key_column, inputs, input_format: Defaults of the states.
    """

    uid: str
    states: tuple[FlinkStateSpec, ...]
    key_type: str | None = None
    pyflink: bool = False
    parallelism: int = 1
    max_parallelism: int | None = None
    name: str | None = None
    key_column: str | None = None
    inputs: tuple[str, ...] = ()
    input_format: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        states = []
        for state in self.states:
            states.append(replace(state, key_column=state.key_column or self.key_column,
                                  inputs=state.inputs or self.inputs,
                                  input_format=state.input_format or self.input_format))
        object.__setattr__(self, "states", tuple(states))
        if not self.uid:
            raise BadInputError("an operator needs a uid (--uid)")
        if not self.states:
            raise BadInputError(f"operator {self.uid!r} has no states")
        names = [s.name for s in self.states]
        if len(set(names)) != len(names):
            raise BadInputError(f"operator {self.uid!r}: a state name is given twice ({', '.join(names)})")
        for state in self.states:
            if not state.inputs:
                raise BadInputError(f"operator {self.uid!r} state {state.name!r}: give --input")
            if not state.key_column:
                raise BadInputError(f"operator {self.uid!r} state {state.name!r}: give --key-column")
        if self.key_type is not None:
            parse_flink_type(self.key_type)
        try:
            check_parallelism(self.parallelism, self.max_parallelism or 32768)
        except BadInputError as exc:
            raise BadInputError(f"operator {self.uid!r}: {exc}") from None

    @property
    def target_max_parallelism(self) -> int:
        return self.max_parallelism or int(compute_default_max_parallelism(self.parallelism))


@dataclass(frozen=True)
class FlinkBootstrapSpec:
    """A new canonical Flink savepoint: its operators and where it goes.

    Attributes:
        operators: The keyed operators.
        output: The new savepoint directory (must not exist or be empty).
        metadata_version: The ``_metadata`` version (6: Flink 2.x; 4: 1.16 to 1.20; 3: 1.15 and all later).
        checkpoint_id: The savepoint's checkpoint id (the restoring job's checkpoints count on from it).
        storage_options / output_storage_options: fsspec options of the inputs and of the output.
    """

    operators: tuple[FlinkOperatorSpec, ...]
    output: str
    metadata_version: int = DEFAULT_METADATA_VERSION
    checkpoint_id: int = 1
    storage_options: dict[str, Any] | None = field(default=None, hash=False)
    output_storage_options: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "operators", tuple(self.operators))
        if not self.output:
            raise BadInputError("give the output directory (-o OUT)")
        if not self.operators:
            raise BadInputError("the spec has no operators")
        check_metadata_version(self.metadata_version)
        if self.checkpoint_id < 0:
            raise BadInputError(f"checkpoint id {self.checkpoint_id} must not be negative")
        uids = [op.uid for op in self.operators]
        if len(set(uids)) != len(uids):
            raise BadInputError(f"an operator uid is given twice ({', '.join(uids)})")


def _state_from(raw: Mapping[str, Any], where: str) -> FlinkStateSpec:
    known = {"name", "kind", "value_columns", "value_column", "inputs", "input", "input_format", "key_column",
             "user_key_column", "namespace_column", "value_type", "user_key_type", "ttl_timestamp", "timer_service"}
    _unknown(raw, known, where)
    values = raw.get("value_columns", raw.get("value_column", ()))
    inputs = raw.get("inputs", raw.get("input", ()))
    return FlinkStateSpec(
        name=str(raw.get("name", "")), kind=str(raw.get("kind", "value")),
        value_columns=tuple([values] if isinstance(values, str) else values),
        inputs=tuple([inputs] if isinstance(inputs, str) else inputs), input_format=raw.get("input_format"),
        key_column=raw.get("key_column"), user_key_column=raw.get("user_key_column"),
        namespace_column=raw.get("namespace_column"), value_type=raw.get("value_type"),
        user_key_type=raw.get("user_key_type"), ttl_timestamp=raw.get("ttl_timestamp"),
        timer_service=str(raw.get("timer_service", "user-timers")))


def _unknown(raw: Mapping[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(raw) - known)
    if extra:
        raise BadInputError(f"{where}: unknown field(s) {', '.join(extra)} (known: {', '.join(sorted(known))})")


def _relative(paths: Sequence[str], base: str) -> tuple[str, ...]:
    """Input paths of a spec file resolve against its directory (URLs and absolute paths as they are)."""
    return tuple(p if "://" in p or posixpath.isabs(p) else posixpath.join(base, p) for p in paths)


def load_spec_file(path: str, *, output: str | None = None, metadata_version: int | None = None,
                   storage_options: dict[str, Any] | None = None) -> FlinkBootstrapSpec:
    """The spec in a JSON or TOML file (see docs/FLINK.md, "Writing Flink savepoints").

    ``output`` and ``metadata_version`` (command-line options) override the file's. Relative
    input paths are relative to the file's directory.

    Raises:
        BadInputError: The file is not valid JSON/TOML or does not describe a spec.
    """
    io, local = FileIO.for_path(path, storage_options)
    if not io.exists(local):
        raise BadInputError("no such spec file", path=path)
    text = io.read_bytes(local, limit=16 << 20).decode("utf-8", errors="replace")
    try:
        if path.endswith(".toml"):
            try:
                import tomllib
            except ImportError:  # Python 3.10
                raise BadInputError("a TOML spec file needs Python 3.11 or later; write it as JSON", path=path) \
                    from None
            raw: Any = tomllib.loads(text)
        else:
            raw = json.loads(text)
    except ValueError as exc:
        raise BadInputError(f"not a valid {'TOML' if path.endswith('.toml') else 'JSON'} spec: {exc}", path=path) \
            from None
    if not isinstance(raw, dict) or not isinstance(raw.get("operators"), list):
        raise BadInputError("a spec file is an object with an \"operators\" list", path=path)
    _unknown(raw, {"operators", "output", "metadata_version", "checkpoint_id"}, path)
    base = posixpath.dirname(io.url(local))
    operators = []
    for index, op in enumerate(raw["operators"]):
        where = f"{path}: operators[{index}]"
        if not isinstance(op, dict):
            raise BadInputError(f"{where} is not an object")
        _unknown(op, {"uid", "name", "states", "key_type", "pyflink", "parallelism", "max_parallelism", "key_column",
                      "inputs", "input", "input_format"}, where)
        states = [_state_from(s, f"{where}.states[{i}]") for i, s in enumerate(op.get("states", []))
                  if isinstance(s, dict)]
        if len(states) != len(op.get("states", [])):
            raise BadInputError(f"{where}: every state is an object")
        states = [replace(s, inputs=_relative(s.inputs, base)) for s in states]
        inputs = op.get("inputs", op.get("input", ()))
        operators.append(FlinkOperatorSpec(
            uid=str(op.get("uid", "")), states=tuple(states), key_type=op.get("key_type"),
            pyflink=bool(op.get("pyflink", False)), parallelism=int(op.get("parallelism", 1)),
            max_parallelism=op.get("max_parallelism"), name=op.get("name"), key_column=op.get("key_column"),
            inputs=_relative([inputs] if isinstance(inputs, str) else list(inputs or ()), base),
            input_format=op.get("input_format")))
    out = output or raw.get("output")
    if not out:
        raise BadInputError("give the output directory (-o OUT, or \"output\" in the spec file)", path=path)
    return FlinkBootstrapSpec(tuple(operators), out, metadata_version or int(raw.get("metadata_version", 6)),
                              int(raw.get("checkpoint_id", 1)), storage_options=storage_options)


# ----------------------------------------------------------------------------- types from the schema


def flink_type_of_arrow(arrow_type: pa.DataType, column: str) -> str:
    """The Flink type of an Arrow column's values (``int64`` -> ``long``, ``struct`` -> ``row``...).

    Raises:
        BadInputError: A type with no Flink counterpart (names the column).
    """
    import pyarrow as pa
    import pyarrow.types as t

    scalars = [(t.is_int64, "long"), (t.is_int32, "int"), (t.is_int16, "short"), (t.is_int8, "byte"),
               (t.is_boolean, "boolean"), (t.is_float64, "double"), (t.is_float32, "float"),
               (t.is_string, "string"), (t.is_large_string, "string"), (t.is_binary, "bytes"),
               (t.is_large_binary, "bytes"), (t.is_timestamp, "timestamp"), (t.is_uint8, "short"),
               (t.is_uint16, "int"), (t.is_uint32, "long")]
    for test, name in scalars:
        if test(arrow_type):
            return name
    if t.is_struct(arrow_type):
        fields = ",".join(f"{f.name}:{flink_type_of_arrow(f.type, column)}" for f in arrow_type)
        return f"row<{fields}>"
    if t.is_map(arrow_type):
        assert isinstance(arrow_type, pa.MapType)
        return f"map<{flink_type_of_arrow(arrow_type.key_type, column)},{flink_type_of_arrow(arrow_type.item_type, column)}>"
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        return f"list<{flink_type_of_arrow(arrow_type.value_type, column)}>"
    raise BadInputError(f"column {column!r} has type {arrow_type}, which has no Flink type here: declare one "
                        "(--value-type / --key-type) and cast the column")


# ----------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class StatePlan:
    """A state resolved against its input: its layout and how rows become entries."""

    spec: FlinkStateSpec
    layout: StateLayout
    list_per_row: bool

    @property
    def concat(self) -> bool:
        """Entries of one key are joined (list state, one element per row)."""
        return self.spec.kind == "list" and not self.list_per_row


@dataclass(frozen=True)
class OperatorPlan:
    """An operator resolved against its inputs: key layout, states, header and key groups."""

    spec: FlinkOperatorSpec
    key: KeyLayout
    states: tuple[StatePlan, ...]
    max_parallelism: int

    @property
    def header(self) -> bytes:
        return encode_keyed_backend_meta(self.key.snapshot, [s.layout.meta() for s in self.states])

    @property
    def concat_states(self) -> frozenset[int]:
        return frozenset(i for i, s in enumerate(self.states) if s.concat)

    @property
    def hasher(self) -> KeyHasher:
        found = key_hasher(self.key.snapshot)
        assert found is not None  # KeyLayout admits hashable types only
        return found

    def key_groups(self, index: int) -> Any:
        return compute_key_group_range_for_operator_index(self.max_parallelism, self.spec.parallelism, index)


def _declared(declared: str | None, schema: pa.Schema, columns: Sequence[str], where: str) -> FlinkType:
    if declared is not None:
        return parse_flink_type(declared)
    for column in columns:
        if column not in schema.names:
            raise BadInputError(f"{where}: no column {column!r} (columns: {', '.join(schema.names)})")
    if len(columns) == 1:
        return parse_flink_type(flink_type_of_arrow(schema.field(columns[0]).type, columns[0]))
    fields = ",".join(f"{c}:{flink_type_of_arrow(schema.field(c).type, c)}" for c in columns)
    return parse_flink_type(f"row<{fields}>")


def _check_columns(schema: pa.Schema, columns: Sequence[str], where: str) -> None:
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise BadInputError(f"{where}: no column {missing[0]!r} (columns: {', '.join(schema.names)})")


def plan_operator(spec: FlinkOperatorSpec, schemas: Sequence[pa.Schema]) -> OperatorPlan:
    """Resolve ``spec`` against the schemas of its states' inputs (``schemas[i]`` of state ``i``).

    Raises:
        BadInputError: A missing column, a type with no Flink form, a kind the layout refuses.
    """
    import pyarrow.types as t

    first = spec.states[0]
    assert first.key_column is not None
    key_type = _declared(spec.key_type, schemas[0], [first.key_column], f"operator {spec.uid!r}")
    try:
        key = KeyLayout(key_type, spec.pyflink)
    except BadInputError as exc:
        raise BadInputError(f"operator {spec.uid!r}: {exc}") from None
    states = []
    for state, schema in zip(spec.states, schemas):
        where = f"operator {spec.uid!r} state {state.name!r}"
        _check_columns(schema, state.columns, where)
        value_type = user_key_type = None
        list_per_row = False
        if state.kind not in TIMER_KINDS:
            value_type = _declared(state.value_type, schema, state.value_columns, where)
            if state.kind == "list" and len(state.value_columns) == 1:
                column_type = schema.field(state.value_columns[0]).type
                is_list = t.is_list(column_type) or t.is_large_list(column_type)
                if state.value_type is None and is_list:
                    value_type, list_per_row = value_type.args[0], True
                elif is_list and value_type.name != "list":
                    list_per_row = True
            if state.kind == "map":
                assert state.user_key_column is not None
                user_key_type = _declared(state.user_key_type, schema, [state.user_key_column], where)
        try:
            layout = StateLayout(state.name, state.kind, key, value_type, user_key_type,
                                 "window" if state.namespace_column else "void", state.ttl_timestamp,
                                 state.timer_service)
        except BadInputError as exc:
            raise BadInputError(f"operator {spec.uid!r}: {exc}") from None
        states.append(StatePlan(state, layout, list_per_row))
    names = [s.layout.flink_name for s in states]
    if len(set(names)) != len(names):
        raise BadInputError(f"operator {spec.uid!r}: two states have the Flink name {names}")
    max_parallelism = spec.target_max_parallelism
    check_parallelism(spec.parallelism, max_parallelism)
    return OperatorPlan(spec, key, tuple(states), max_parallelism)


# ----------------------------------------------------------------------------- rows -> entries


class RowEncoder:
    """Rows of one state -> entries ``(key group, state id, key, value)``.

    Args:
        plan: The operator.
        state: The index of the state in ``plan.states``.
    """

    def __init__(self, plan: OperatorPlan, state: int) -> None:
        self.plan, self.state = plan, state
        self.layout = plan.states[state].layout
        self.spec = plan.states[state].spec
        self.hasher = plan.hasher
        self.max_parallelism = plan.max_parallelism
        self._key_groups: dict[bytes, int] = {}

    def key_group(self, key_bytes: bytes) -> int:
        found = self._key_groups.get(key_bytes)
        if found is None:
            code = self.hasher.java_hash(key_bytes, 0, where="a bootstrapped key")[0]
            found = flink_murmur_hash(code) % self.max_parallelism
            if len(self._key_groups) < 1 << 16:
                self._key_groups[key_bytes] = found
        return found

    def encode(self, batch: pa.RecordBatch | pa.Table, first_row: int = 0) -> pa.Table:
        """The entries of ``batch`` (``first_row``: its first row's number in the input, for messages).

        Raises:
            BadInputError: A value that does not fit its type (names the state, column and row).
        """
        spec, layout, key = self.spec, self.layout, self.plan.key
        assert spec.key_column is not None
        keys_in = batch.column(spec.key_column).to_pylist()
        ns_in = batch.column(spec.namespace_column).to_pylist() if spec.namespace_column else None
        uk_in = batch.column(spec.user_key_column).to_pylist() if spec.user_key_column else None
        columns = [batch.column(c).to_pylist() for c in spec.value_columns]
        names = spec.value_columns
        many = len(columns) > 1
        concat = self.plan.states[self.state].concat
        out_groups: list[int] = []
        out_keys: list[bytes] = []
        out_values: list[bytes] = []
        for row in range(len(keys_in)):
            try:
                key_bytes = key.encode(keys_in[row])
                value: Any = dict(zip(names, (c[row] for c in columns))) if many else columns[0][row]
                namespace = ns_in[row] if ns_in is not None else None
                user_key = uk_in[row] if uk_in is not None else None
                if concat:
                    composite, data = layout.list_element(key_bytes, namespace, value)
                else:
                    composite, data = layout.entry(key_bytes, namespace, user_key, value)
            except BadInputError as exc:
                raise BadInputError(f"{exc} (row {first_row + row + 1}, key column {spec.key_column!r})") from None
            out_groups.append(self.key_group(key_bytes))
            out_keys.append(composite)
            out_values.append(data)
        return entries_table(out_groups, [self.state] * len(out_keys), out_keys, out_values)


# ----------------------------------------------------------------------------- report


@dataclass
class FlinkStateReport:
    """One written state."""

    name: str
    flink_name: str
    kind: str
    value_type: str | None
    user_key_type: str | None
    rows: int = 0


@dataclass
class FlinkOperatorReport:
    """One written operator."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("entries", "bytes"))

    uid: str
    operator_id: str
    parallelism: int
    max_parallelism: int
    key_type: str
    pyflink: bool
    states: list[FlinkStateReport] = field(default_factory=list)
    subtasks: list[WrittenSubtask] = field(default_factory=list)

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.subtasks)

    @property
    def bytes(self) -> int:
        return sum(s.subtask.size for s in self.subtasks)


@dataclass
class FlinkBootstrapReport:
    """What ``bootstrap --format flink`` wrote (either engine)."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("format", "entries", "bytes"), digits={"elapsed_s": 3})

    output: str
    metadata_version: int
    checkpoint_id: int
    engine: str = "local"
    operators: list[FlinkOperatorReport] = field(default_factory=list)
    rows_read: int = 0
    metadata_bytes: int = 0
    elapsed_s: float = 0.0

    @property
    def entries(self) -> int:
        return sum(op.entries for op in self.operators)

    @property
    def bytes(self) -> int:
        return sum(op.bytes for op in self.operators) + self.metadata_bytes

    @property
    def format(self) -> str:
        """``flink``: the format written."""
        return "flink"


def operator_report(plan: OperatorPlan) -> FlinkOperatorReport:
    """The report of ``plan`` before anything is written."""
    spec = plan.spec
    states = [FlinkStateReport(s.spec.name, s.layout.flink_name, s.spec.kind,
                               s.layout.value_type.text if s.layout.value_type else None,
                               s.layout.user_key_type.text if s.layout.user_key_type else None) for s in plan.states]
    return FlinkOperatorReport(spec.uid, operator_id_for_uid(spec.uid), spec.parallelism,
                               plan.max_parallelism, plan.key.serialized_type.text, spec.pyflink, states)


def new_operator(plan: OperatorPlan, written: Sequence[WrittenSubtask]) -> NewOperator:
    spec = plan.spec
    return NewOperator(spec.uid, spec.name or spec.uid, spec.parallelism, plan.max_parallelism,
                       tuple(w.subtask for w in written))


# ----------------------------------------------------------------------------- the local engine


def _open_inputs(spec: FlinkBootstrapSpec, op: FlinkOperatorSpec) -> list[RowFiles]:
    return [open_rows(RowInput(s.inputs, s.input_format, spec.storage_options)) for s in op.states]


def bootstrap_flink_savepoint(spec: FlinkBootstrapSpec, *, batch_size: int = 65536, spill_dir: str | None = None,
                              memory_budget: int = DEFAULT_MEMORY_BUDGET,
                              progress: ProgressFactory | None = None) -> FlinkBootstrapReport:
    """Write the canonical Flink savepoint ``spec`` describes on the local engine.

    Raises:
        BadInputError: An input that does not fit the spec (missing column, a value that does
            not fit its type: the message names the state, column and row), a non-empty output.
        PathNotFoundError: An input that does not exist.
    """
    started = time.monotonic()
    opened = [(op, _open_inputs(spec, op)) for op in spec.operators]
    plans = [(plan_operator(op, [f.schema for f in files]), files) for op, files in opened]
    out_io, out_path = FileIO.for_path(spec.output, spec.output_storage_options)
    report = FlinkBootstrapReport(out_io.url(out_path), spec.metadata_version, spec.checkpoint_id)
    work = sum(f.bytes for _, files in plans for f in files)
    with (progress or no_progress)("bootstrapping", total=work) as advance, \
            staged_output_dir(spec.output, spec.output_storage_options) as (io, directory):
        operators = []
        for plan, files in plans:
            op_report = operator_report(plan)
            with EntrySorter(plan.max_parallelism, plan.spec.parallelism, concat_states=plan.concat_states,
                             memory_budget=memory_budget, expected_bytes=2 * sum(f.bytes for f in files),
                             spill_dir=spill_dir) as sorter:
                for index, (state, rows) in enumerate(zip(plan.states, files)):
                    encoder = RowEncoder(plan, index)
                    first = 0
                    for batch in rows.batches(state.spec.columns, batch_size, advance):
                        sorter.add(encoder.encode(batch, first))
                        first += batch.num_rows
                    op_report.states[index].rows = first
                    report.rows_read += first
                header = plan.header
                for subtask in range(plan.spec.parallelism):
                    op_report.subtasks.append(write_subtask_stream(io, directory, subtask, header, plan.max_parallelism,
                                                                   plan.key_groups(subtask), sorter.groups(subtask)))
            operators.append(new_operator(plan, op_report.subtasks))
            report.operators.append(op_report)
        report.metadata_bytes = publish_savepoint(io, directory, operators, version=spec.metadata_version,
                                                  checkpoint_id=spec.checkpoint_id)
    report.elapsed_s = time.monotonic() - started
    return report
