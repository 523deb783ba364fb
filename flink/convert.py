"""``statekit convert``: move a job's keyed state between statekit and Apache Flink savepoints.

**statekit -> Flink** (:func:`convert_to_flink`): every keyed operator of a statekit savepoint
becomes an operator of a canonical Flink savepoint under the same uid (Flink's operator id is
the hash of the uid), at the same parallelism and max parallelism (key groups are reassigned
by Flink's hash, :mod:`statekit.flink.key_hash`). Each keyed state is laid out as a Flink job
declares it (:mod:`statekit.flink.state_layout`): value, list, map, reducing and aggregating
state by the Flink types of their declared types (statekit ``int`` -> ``long``, ``float`` ->
``double``, ``struct`` -> ``row``...; ``--value-type`` declares or overrides one, ``--state-kind``
turns a value state into Flink's reducing or aggregating state), window state
(``namespace_type list<int>``) under Flink's ``TimeWindow`` namespaces (``GlobalWindow`` for
``[]``), the runtime's timers (``_timers``: ``e:<ts>``/``p:<ts>``) as Flink's
``_timer_state/event_user-timers`` / ``processing_user-timers`` and window timers
(``_window_timers``) as ``event_window-timers`` / ``processing_window-timers``. State with a
TTL keeps its entries' last-access time (expiry minus the TTL). What has no Flink meaning is
left out and listed: operator state (source splits and offsets, sink transactions,
watermarks, user operator state), the window operator's trigger and merging-set state.
``--pyflink`` lays keyed state out as PyFlink does (``python-state-<name>``, ``Row`` keys).

**Flink -> statekit** (:func:`convert_to_statekit`): every decodable keyed state of a canonical
Flink savepoint (also native and incremental RocksDB snapshots, read as ``export`` reads them)
becomes statekit keyed state under the same uid, typed by the Flink serializers (PyFlink
``byte[]`` values by ``--value-type``), timers of a process function as the runtime's
``_timers``. PyFlink operators (every state ``python-state-*``) get their Python state names
and unwrapped keys. States that do not decode are left out and listed.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from statekit.flink.entry_sorter import DEFAULT_MEMORY_BUDGET, EntrySorter, entries_table
from statekit.flink.key_hash import KeyHasher, key_hasher
from statekit.flink.keygroups import flink_murmur_hash
from statekit.flink.savepoint_metadata import DEFAULT_METADATA_VERSION, NewOperator, check_metadata_version
from statekit.flink.savepoint_writer import WrittenSubtask, publish_savepoint, write_subtask_stream
from statekit.flink.state_layout import PYTHON_STATE_PREFIX, KeyLayout, StateLayout
from statekit.flink.state_meta_writer import encode_keyed_backend_meta
from statekit.flink.type_info import FlinkType, parse_flink_type
from statekit.flink.uids import operator_id_for_uid
from statekit.readers.progress import ProgressFactory, no_progress
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.window_state import (
    WINDOW_MERGING_SET_STATE,
    WINDOW_NAMESPACE_TYPE,
    WINDOW_TIMERS_STATE,
    WINDOW_TRIGGER_STATE,
)
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import JsonShape, json_data
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind
from statekit.statefmt.value_types import ValueType, parse_value_type
from statekit.writers.staging import staged_output_dir

__all__ = ["ConvertSpec", "ConvertReport", "ConvertedState", "LeftOut", "convert_to_flink", "convert_to_statekit",
           "flink_type_of_value_type", "DIRECTIONS"]

DIRECTIONS = ("flink", "statekit")
RUNTIME_TIMERS_STATE = "_timers"  # statekit.runtime.operators.timers.TIMERS
_OPERATOR_STATE_REASONS = {
    "offsets": "a statekit source's read offsets: a Flink source keeps its own splits",
    "splits": "a statekit source's splits: a Flink source keeps its own",
    "_watermark": "a statekit operator's watermark: Flink does not keep watermarks in savepoints",
    "pending-files": "a statekit sink's pending transaction: a Flink sink commits its own",
    "pending-transactions": "a statekit sink's pending transaction: a Flink sink commits its own",
}


@dataclass(frozen=True)
class ConvertSpec:
    """One conversion.

    Attributes:
        source: The savepoint to read (statekit for ``to="flink"``, Flink for ``to="statekit"``).
        output: The new savepoint directory (must not exist or be empty).
        to: ``flink`` or ``statekit``.
        pyflink: (to Flink) lay keyed state out as PyFlink does.
        key_types: (to Flink) Flink key type per uid (``""``: every operator); default from the keys.
        value_types: Declared types per ``uid/state`` or ``state``: Flink types (to Flink), PyFlink
            value types (to statekit: how PyFlink ``byte[]`` values decode).
        state_kinds: (to Flink) Flink kind per ``uid/state`` or ``state`` (``reducing``, ``aggregating``).
        metadata_version: (to Flink) the ``_metadata`` version.
        uids: (to statekit) uids that label operators of metadata without uids (v3, v4).
        storage_options / output_storage_options: fsspec options of source and output.
    """

    source: str
    output: str
    to: str
    pyflink: bool = False
    key_types: dict[str, str] = field(default_factory=dict, hash=False)
    value_types: dict[str, str] = field(default_factory=dict, hash=False)
    state_kinds: dict[str, str] = field(default_factory=dict, hash=False)
    metadata_version: int = DEFAULT_METADATA_VERSION
    uids: tuple[str, ...] = ()
    storage_options: dict[str, Any] | None = field(default=None, hash=False)
    output_storage_options: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.to not in DIRECTIONS:
            raise BadInputError(f"--to {self.to!r}: expected one of {', '.join(DIRECTIONS)}")
        if not self.output:
            raise BadInputError("give the output directory (-o OUT)")
        check_metadata_version(self.metadata_version)
        if self.to == "statekit" and (self.pyflink or self.key_types or self.state_kinds):
            raise BadInputError("--pyflink, --key-type and --state-kind shape a Flink savepoint (--to flink); a "
                                "Flink savepoint's own serializers say what its state holds")
        for kind in self.state_kinds.values():
            if kind not in ("value", "reducing", "aggregating", "list", "map"):
                raise BadInputError(f"--state-kind: {kind!r} is not value, reducing, aggregating, list or map")

    def declared(self, table: dict[str, str], uid: str, state: str) -> str | None:
        """The entry of ``table`` for ``uid/state``, else ``state``, else ``""`` (any)."""
        for name in (f"{uid}/{state}", state, ""):
            if name in table:
                return table[name]
        return None


@dataclass(frozen=True)
class ConvertedState:
    """One state written: its source and target names, kind and entries."""

    uid: str
    state: str
    target: str
    kind: str
    entries: int


@dataclass(frozen=True)
class LeftOut:
    """One state not converted, and why."""

    uid: str
    state: str
    kind: str
    reason: str


@dataclass
class ConvertReport:
    """What ``convert`` wrote and what it left out."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("entries",), digits={"elapsed_s": 3})

    source: str
    output: str
    to: str
    operators: list[dict[str, Any]] = field(default_factory=list)
    states: list[ConvertedState] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    metadata_version: int | None = None
    elapsed_s: float = 0.0

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.states)


# ----------------------------------------------------------------------------- statekit types -> Flink types


def flink_type_of_value_type(declared: ValueType) -> FlinkType:
    """The Flink type holding values of a statekit declared type (``int`` -> ``long``...).

    Raises:
        BadInputError: ``json`` (any value): declare the Flink type (``--value-type``).
    """
    return parse_flink_type(_flink_text(declared))


def _flink_text(declared: ValueType) -> str:
    scalars = {"int": "long", "float": "double", "string": "string", "bool": "boolean", "bytes": "bytes",
               "timestamp": "timestamp"}
    if declared.name in scalars:
        return scalars[declared.name]
    if declared.name == "list":
        return f"list<{_flink_text(declared.args[0])}>"
    if declared.name == "map":
        return f"map<{_flink_text(declared.args[0])},{_flink_text(declared.args[1])}>"
    if declared.name == "struct":
        return "row<" + ",".join(f"{n}:{_flink_text(t)}" for n, t in zip(declared.fields, declared.args)) + ">"
    raise BadInputError(f"declared type {declared} (any value) has no Flink type: declare one with --value-type")


def _key_type_of(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (int, "long"), (float, "double"), (str, "string")):
        if isinstance(value, kind):
            return name
    if isinstance(value, dict) and value:
        return "row<" + ",".join(f"{k}:{_key_type_of(v)}" for k, v in value.items()) + ">"
    raise BadInputError(f"cannot tell the Flink type of key {value!r}: give --key-type")


# ----------------------------------------------------------------------------- statekit -> Flink


@dataclass
class _Target:
    """One Flink state to write from one statekit state."""

    source: str
    layout: StateLayout
    domain: str | None = None  # timers: "e" or "p" of the user keys to take


def _timer_layouts(name: str, key: KeyLayout, namespace: str) -> list[_Target]:
    service = "user-timers" if namespace == "void" else "window-timers"
    return [_Target(name, StateLayout(name, kind, key, namespace=namespace, timer_service=service), domain)
            for kind, domain in (("event-timers", "e"), ("processing-timers", "p"))]


def _namespace(reader: SavepointReader, op: OperatorMetadata, d: StateDescriptor) -> str:
    """``void``, or the window namespace of window state: ``global`` when its windows are ``[]``."""
    if d.namespace_type != WINDOW_NAMESPACE_TYPE:
        return "void"
    for columns in reader.read_keyed_columns(op.uid, d.name):
        if columns["namespace"]:
            return "global" if columns["namespace"][0] == [] else "window"
    return "window"


def _state_targets(spec: ConvertSpec, reader: SavepointReader, op: OperatorMetadata, d: StateDescriptor,
                   key: KeyLayout, report: ConvertReport) -> list[_Target]:
    """The Flink states of one statekit state (none: left out, with the reason recorded)."""
    def leave(reason: str) -> list[_Target]:
        report.left_out.append(LeftOut(op.uid, d.name, d.kind.value, reason))
        return []

    if not d.keyed:
        return leave(_OPERATOR_STATE_REASONS.get(d.name, "operator state: Flink's operator state is not written"))
    if d.name in (WINDOW_TRIGGER_STATE, WINDOW_MERGING_SET_STATE):
        return leave("statekit's window operator state: Flink's triggers and merging windows keep their own")
    if d.name == RUNTIME_TIMERS_STATE:
        return _timer_layouts(d.name, key, "void")
    if d.name == WINDOW_TIMERS_STATE:
        return leave("window timers: PyFlink has no window operator here") if key.pyflink \
            else _timer_layouts(d.name, key, _namespace(reader, op, d))
    if d.namespace_type not in (None, WINDOW_NAMESPACE_TYPE):
        return leave(f"namespace type {d.namespace_type}: Flink namespaces are windows or none")
    namespace = _namespace(reader, op, d)
    if key.pyflink and namespace != "void":
        return leave("window state: the PyFlink layout has no window namespaces (convert without --pyflink)")
    declared = spec.declared(spec.value_types, op.uid, d.name)
    kind = spec.declared(spec.state_kinds, op.uid, d.name) or d.kind.value
    try:
        value_type = parse_flink_type(declared) if declared else _declared_flink_type(d, op)
        user_key_type = None
        if d.kind is StateKind.MAP:
            if not d.user_key_type:
                raise BadInputError(f"operator {op.uid!r} map state {d.name!r} declares no key type")
            user_key_type = flink_type_of_value_type(parse_value_type(d.user_key_type))
        layout = StateLayout(d.name, kind, key, value_type, user_key_type, namespace,
                             ttl_timestamp=0 if d.ttl_ms else None)
    except BadInputError as exc:
        message = str(exc)
        raise BadInputError(message if message.startswith("operator") else f"operator {op.uid!r} state "
                            f"{d.name!r}: {message}") from None
    return [_Target(d.name, layout)]


def _declared_flink_type(d: StateDescriptor, op: OperatorMetadata) -> FlinkType:
    if not d.value_type:
        raise BadInputError(f"operator {op.uid!r} state {d.name!r} declares no value type: give --value-type "
                            f"{op.uid}/{d.name}=TYPE (a Flink type, e.g. long, row<a:string,n:int>)")
    return flink_type_of_value_type(parse_value_type(d.value_type))  # list state: the element type


def _first_key(reader: SavepointReader, op: OperatorMetadata) -> Any:
    for d in op.states:
        if d.keyed:
            for columns in reader.read_keyed_columns(op.uid, d.name):
                if columns["key"]:
                    return columns["key"][0]
    return None


class _OperatorWriter:
    """Entries of one statekit operator's keyed states -> Flink entries (sorter input)."""

    def __init__(self, reader: SavepointReader, op: OperatorMetadata, key: KeyLayout, targets: list[_Target]) -> None:
        self.reader, self.op, self.key, self.targets = reader, op, key, targets
        hasher = key_hasher(key.snapshot)
        assert hasher is not None
        self.hasher: KeyHasher = hasher
        self.counts = [0] * len(targets)

    def _key_group(self, key_bytes: bytes, cache: dict[bytes, int]) -> int:
        found = cache.get(key_bytes)
        if found is None:
            found = flink_murmur_hash(self.hasher.java_hash(key_bytes, 0, where="a converted key")[0]) \
                % self.op.max_parallelism
            cache[key_bytes] = found
        return found

    def entries(self, state_id: int) -> Iterator[Any]:
        """Entries tables of one target state."""
        target = self.targets[state_id]
        layout = target.layout
        descriptor = self.op.state(target.source)
        ttl = descriptor.ttl_ms
        for columns in self.reader.read_keyed_columns(self.op.uid, target.source):
            cache: dict[bytes, int] = {}
            groups, keys, values = [], [], []
            user_keys = columns.get("user_key")
            for row, key in enumerate(columns["key"]):
                namespace = columns["namespace"][row]
                try:
                    key_bytes = self.key.encode(key)
                    if layout.is_timers:
                        timer = _timer(user_keys[row] if user_keys is not None else None, target)
                        if timer is None:
                            continue
                        entry = layout.entry(key_bytes, namespace, None, timer)
                    else:
                        expiry = columns["expiry"][row]
                        stamp = expiry - ttl if expiry is not None and ttl else None
                        uk = user_keys[row] if user_keys is not None else None
                        entry = layout.entry(key_bytes, namespace, uk, columns["value"][row], timestamp=stamp)
                except BadInputError as exc:
                    raise BadInputError(f"operator {self.op.uid!r}: {exc} (key {key!r})") from None
                groups.append(self._key_group(key_bytes, cache))
                keys.append(entry[0])
                values.append(entry[1])
            self.counts[state_id] += len(keys)
            yield entries_table(groups, [state_id] * len(keys), keys, values)


def _timer(user_key: Any, target: _Target) -> int | None:
    """The timestamp of a timer user key of ``target``'s domain, else ``None``."""
    if isinstance(user_key, str):  # the runtime's _timers: "e:<ts>" / "p:<ts>"
        domain, _, stamp = user_key.partition(":")
        if domain == target.domain and stamp.lstrip("-").isdigit():
            return int(stamp)
        if domain in ("e", "p") and stamp.lstrip("-").isdigit():
            return None
    elif isinstance(user_key, (list, tuple)) and len(user_key) == 2:  # _window_timers: [domain, ts]
        domain = "e" if user_key[0] == 0 else "p"
        return int(user_key[1]) if domain == target.domain else None
    raise BadInputError(f"timer {user_key!r} of {target.source!r} is not a timer the runtime writes")


def convert_to_flink(spec: ConvertSpec, *, memory_budget: int = DEFAULT_MEMORY_BUDGET, spill_dir: str | None = None,
                     progress: ProgressFactory | None = None) -> ConvertReport:
    """Write the keyed state of a statekit savepoint as a canonical Flink savepoint.

    Raises:
        BadInputError: Not a statekit savepoint, no keyed state, a state whose type has no
            Flink form or is not declared (the message says which option declares it).
    """
    started = time.monotonic()
    reader = SavepointReader.read(spec.source, storage_options=spec.storage_options)
    out_io, out_path = FileIO.for_path(spec.output, spec.output_storage_options)
    report = ConvertReport(reader.path, out_io.url(out_path), "flink", metadata_version=spec.metadata_version)
    plans = []
    for op in reader.operators:
        if not op.keyed:
            report.left_out += [LeftOut(op.uid, d.name, d.kind.value, _OPERATOR_STATE_REASONS.get(
                d.name, "operator state: Flink's operator state is not written")) for d in op.states]
            continue
        declared_key = spec.key_types.get(op.uid, spec.key_types.get(""))
        first = _first_key(reader, op)
        if first is None and declared_key is None:
            report.left_out += [LeftOut(op.uid, d.name, d.kind.value, "no entries") for d in op.states]
            continue
        key = KeyLayout(parse_flink_type(declared_key or _key_type_of(first)), spec.pyflink)
        targets = [t for d in op.states for t in _state_targets(spec, reader, op, d, key, report)]
        if targets:
            plans.append((op, key, targets))
    if not plans:
        raise BadInputError("has no keyed state to convert (left out: "
                            + ", ".join(f"{s.uid}/{s.state}" for s in report.left_out) + ")", path=reader.path)
    with (progress or no_progress)("converting", total=sum(op.total_bytes for op, _, _ in plans)) as advance, \
            staged_output_dir(spec.output, spec.output_storage_options) as (io, directory):
        operators = []
        for op, key, targets in plans:
            writer = _OperatorWriter(reader, op, key, targets)
            header = encode_keyed_backend_meta(key.snapshot, [t.layout.meta() for t in targets])
            written: list[WrittenSubtask] = []
            with EntrySorter(op.max_parallelism, op.parallelism, memory_budget=memory_budget,
                             expected_bytes=2 * op.total_bytes, spill_dir=spill_dir) as sorter:
                for state_id in range(len(targets)):
                    for table in writer.entries(state_id):
                        sorter.add(table)
                advance(op.uid, op.total_bytes)
                for index in range(op.parallelism):
                    kgs = compute_key_group_range_for_operator_index(op.max_parallelism, op.parallelism, index)
                    written.append(write_subtask_stream(io, directory, index, header, op.max_parallelism, kgs,
                                                        sorter.groups(index)))
            operators.append(NewOperator(op.uid, op.name, op.parallelism, op.max_parallelism,
                                         tuple(w.subtask for w in written)))
            report.operators.append({"uid": op.uid, "operator_id": operator_id_for_uid(op.uid),
                                     "parallelism": op.parallelism, "max_parallelism": op.max_parallelism,
                                     "key_type": key.serialized_type.text,
                                     "subtasks": json_data(written)})
            report.states += [ConvertedState(op.uid, t.source, t.layout.flink_name, t.layout.flink_kind, count)
                              for t, count in zip(targets, writer.counts)]
        publish_savepoint(io, directory, operators, version=spec.metadata_version,
                          checkpoint_id=reader.metadata.checkpoint_id)
    report.elapsed_s = time.monotonic() - started
    return report


# ----------------------------------------------------------------------------- Flink -> statekit

_SPARK_TO_DECLARED = {"bigint": "int", "int": "int", "smallint": "int", "tinyint": "int", "double": "float",
                      "float": "float", "boolean": "bool", "binary": "bytes", "array": "list", "string": "string",
                      "timestamp": "timestamp", "timestamp_ntz": "timestamp", "date": "string", "struct": "struct",
                      "map": "map"}


def _statekit_value(value: Any) -> Any:
    """A decoded Flink value in statekit's declared types: a date (no statekit type) as ISO text."""
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _statekit_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_statekit_value(v) for v in value]
    return value


def declared_type_of_spark(spark_type: str) -> str:
    """A statekit declared type from a Spark DDL type (``struct<f0:bigint>`` -> ``struct<f0:int>``)."""
    def word(match: re.Match[str]) -> str:
        text = match.group(0)
        after = spark_type[match.end():match.end() + 1]
        if after == ":":  # a field name
            return text
        return _SPARK_TO_DECLARED.get(text.lower(), text)

    return re.sub(r"[A-Za-z_][A-Za-z0-9_]*", word, spark_type)


def convert_to_statekit(spec: ConvertSpec, *, progress: ProgressFactory | None = None) -> ConvertReport:
    """Write the decodable keyed state of a Flink snapshot as a statekit savepoint.

    Each state is read whole into memory before it is written (a statekit writer takes rows);
    convert operators one by one for very large state.

    Raises:
        BadInputError: Not a Flink snapshot, nothing decodable, a declared type that does not fit.
    """
    from statekit.flink.entries import decodable_states, read_keyed_state, state_value_types
    from statekit.flink.storage import load_snapshot
    from statekit.writers.savepoint_writer import SavepointWriter

    started = time.monotonic()
    snapshot = load_snapshot(spec.source, storage_options=spec.storage_options, uids=list(spec.uids))
    out_io, out_path = FileIO.for_path(spec.output, spec.output_storage_options)
    report = ConvertReport(snapshot.path, out_io.url(out_path), "statekit")
    writer = SavepointWriter.new_savepoint()
    with (progress or no_progress)("converting", total=len(snapshot.metadata.operators)) as advance:
        for op in snapshot.metadata.operators:
            label = op.label
            keyed = any(sub.managed_keyed_state for sub in op.subtasks)
            if not keyed:
                report.left_out += [LeftOut(label, name, "operator", "operator state is not converted")
                                    for name in _operator_state_names(op)]
                advance(label, 1)
                continue
            value_types = {name: t for name, t in spec.value_types.items() if "/" not in name or
                           name.startswith(f"{label}/")}
            value_types = {name.split("/", 1)[-1]: t for name, t in value_types.items()}
            supported = decodable_states(snapshot, label, value_types=value_types)
            python = bool(supported) and all(s.name.startswith(PYTHON_STATE_PREFIX) or s.kind == "timers"
                                             for s in supported)
            states: list[tuple[StateDescriptor, list[Any]]] = []
            for support in supported:
                if support.decoder is None:
                    report.left_out.append(LeftOut(label, support.name, support.kind, support.reason or "not decodable"))
                    continue
                converted = _to_statekit_state(snapshot, label, support, python, state_value_types(value_types,
                                                                                              support.name),
                                               read_keyed_state)
                if converted is None:
                    report.left_out.append(LeftOut(label, support.name, support.kind,
                                                   "timers of a window or other namespace: only a process "
                                                   "function's timers (VoidNamespace) become the runtime's _timers"))
                    continue
                descriptor, rows = converted
                states.append((descriptor, rows))
                report.states.append(ConvertedState(label, support.name, descriptor.name, descriptor.kind.value,
                                                    len(rows)))
            if states:
                merged = _merge_timers(states)
                writer.with_operator(label, merged, parallelism=op.parallelism, max_parallelism=op.max_parallelism,
                                     name=op.name or label)
                report.operators.append({"uid": label, "parallelism": op.parallelism,
                                         "max_parallelism": op.max_parallelism,
                                         "states": [d.name for d, _ in merged]})
            advance(label, 1)
    if not report.operators:
        raise BadInputError("has no decodable keyed state to convert", path=snapshot.path)
    writer.write(spec.output, storage_options=spec.output_storage_options)
    report.elapsed_s = time.monotonic() - started
    return report


def _operator_state_names(op: Any) -> list[str]:
    names: set[str] = set()
    for sub in op.subtasks:
        for handle in (sub.managed_operator_state, sub.raw_operator_state):
            if handle is not None:
                names.update(getattr(handle, "state_names", ()) or ())
    return sorted(names)


def _to_statekit_state(snapshot: Any, label: str, support: Any, python: bool, value_type: str | None,
                       read: Any) -> tuple[StateDescriptor, list[Any]] | None:
    decoder = support.decoder
    entries = read(snapshot, label, support.name, value_type=value_type)
    unwrap = python and decoder.key.name.startswith("Row<") and "," not in decoder.key.name

    def key_of(key: Any) -> Any:
        return key["f0"] if unwrap and isinstance(key, dict) else key

    if support.kind == "timers":
        if not decoder.value.name.endswith(",VoidNamespace>"):  # Timer<key,namespace>
            return None
        domain = "e" if "event_" in support.name else "p"
        timers: list[Any] = [(key_of(e.key), f"{domain}:{e.value}", True) for e in entries]
        return StateDescriptor(RUNTIME_TIMERS_STATE, StateKind.MAP, value_type="bool", user_key_type="string"), timers
    name = support.name.removeprefix(PYTHON_STATE_PREFIX) if python else support.name
    kind = StateKind(support.kind)
    namespace_type = WINDOW_NAMESPACE_TYPE if decoder.namespace.name == "TimeWindow" else None
    if python and value_type:
        declared = parse_value_type(declared_type_of_spark(decoder.value_type.spark_type)) if decoder.value_type \
            else None
        if kind is StateKind.LIST and declared is not None and not value_type.startswith(("list", "array")):
            kind = StateKind.VALUE  # a PyFlink ValueState: a Java list of one element
    value_spark = decoder.value_type.spark_type if decoder.value_type is not None else (
        decoder.element.spark_type if kind is StateKind.LIST and decoder.element is not None else decoder.value.spark_type)
    if decoder.value_type is not None and decoder.kind == "map":
        value_spark = decoder.value_type.args[1].spark_type
    if kind is StateKind.LIST and decoder.value_type is not None and decoder.value_type.name == "list":
        value_spark = decoder.value_type.args[0].spark_type
    declared_value = declared_type_of_spark(value_spark)  # list state: the element type
    user_key_type = None
    if kind is StateKind.MAP:
        uk = decoder.value_type.args[0].spark_type if decoder.value_type is not None else decoder.user_key.spark_type
        user_key_type = declared_type_of_spark(uk)
    descriptor = StateDescriptor(name, kind, value_type=declared_value, user_key_type=user_key_type,
                                 namespace_type=namespace_type)
    rows: list[Any] = []
    for e in entries:
        namespace = None
        if namespace_type is not None and isinstance(e.namespace, dict):
            namespace = [e.namespace["start"], e.namespace["end"]]
        if kind is StateKind.MAP:
            rows.append((_statekit_value(key_of(e.key)), namespace, _statekit_value(e.user_key),
                         _statekit_value(e.value)))
        else:
            rows.append((_statekit_value(key_of(e.key)), namespace, _statekit_value(e.value)))
    return descriptor, rows


def _merge_timers(states: list[tuple[StateDescriptor, list[Any]]]) -> list[tuple[StateDescriptor, list[Any]]]:
    """Event and processing timers become one ``_timers`` map state."""
    timers = [rows for d, rows in states if d.name == RUNTIME_TIMERS_STATE]
    others = [(d, rows) for d, rows in states if d.name != RUNTIME_TIMERS_STATE]
    if not timers:
        return others
    merged = [row for rows in timers for row in rows]
    return [*others, (StateDescriptor(RUNTIME_TIMERS_STATE, StateKind.MAP, value_type="bool",
                                      user_key_type="string"), merged)]
