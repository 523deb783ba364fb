"""``statekit check SAVEPOINT --target-flink 2.3``: which state will Flink 2 not restore, and the way out.

Offline, from ``_metadata`` and the serializer snapshots of every keyed state
(:mod:`statekit.flink.state_meta`), every state Flink 2.x refuses to restore is named:

* **Kryo 2 state** — a snapshot written by Flink 1.x (metadata version 3 or 4) whose state
  (or a field of it: a POJO field, a tuple, a list element...) is serialized by Kryo. Flink
  2.0 moved to Kryo 5, which does not read Kryo 2's bytes.
* **Scala API serializers** — ``org.apache.flink.api.scala.typeutils.*`` snapshots (case
  classes, ``Option``, ``Either``, ``Try``, Scala collections and enums): Flink 2.0
  removed the Scala API.
* **Legacy serializer snapshots** — ``TypeSerializerConfigSnapshot`` subclasses (class names
  ending in ``ConfigSnapshot``), which Flink 2.0 no longer reads.
* **SourceFunction-era connector state** — operator state of the sources and sinks that
  Flink 2.0 and the connectors released for it removed (``FlinkKafkaConsumer``,
  ``FlinkKafkaProducer``, ``FlinkKinesisConsumer``, ``StreamingFileSink``, the file
  monitoring source of ``readFile``, ``StatefulSequenceSource``), by their state names.

States whose serializer snapshots statekit cannot read are listed as *unknown*, not passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from statekit.flink.state_meta import KRYO_SNAPSHOTS, FlinkStateMeta, SerializerNode
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.json_contract import JsonShape

__all__ = ["FlinkUpgradeFinding", "FlinkUpgradeReport", "check_flink_upgrade", "LEGACY_OPERATOR_STATES"]

SCALA_PACKAGE = "org.apache.flink.api.scala."
FLINK1_METADATA_VERSIONS = (3, 4)  # Flink 1.11-1.20; Flink 2.x writes 5 and later
KRYO_WAY_OUT = ("in Flink 1.x, give the type a Flink serializer (POJO rules, a TypeInformation, Avro) and let the "
                "job migrate the state, or rewrite it with the State Processor API, then take a new savepoint; or "
                "export it with statekit (declare the fields with --value-type) and bootstrap the Flink 2 job")
SCALA_WAY_OUT = ("in Flink 1.x, move the state to Java types (a POJO or Row TypeInformation) with the State "
                 "Processor API, or use a Scala serializer library that supports Flink 2 (flink-scala-api) "
                 "from 1.x on, then take a new savepoint")
LEGACY_SNAPSHOT_WAY_OUT = ("restore once in Flink 1.19 or 1.20 and take a new savepoint: it writes the current "
                           "snapshot format")
# operator state name -> (what wrote it, the way out)
LEGACY_OPERATOR_STATES: dict[str, tuple[str, str]] = {
    "topic-partition-offset-states": (
        "FlinkKafkaConsumer (SourceFunction), removed from the Kafka connector for Flink 2",
        "use KafkaSource starting from these offsets (OffsetsInitializer.offsets(...)) or from the group's "
        "committed offsets, and restore with --allowNonRestoredState"),
    "next-transactional-id-hint": (
        "FlinkKafkaProducer (SinkFunction), removed from the Kafka connector for Flink 2",
        "stop the 1.x job with --drain so that its transactions commit, then use KafkaSink and restore with "
        "--allowNonRestoredState"),
    "next-transactional-id-hint-v2": (
        "FlinkKafkaProducer (SinkFunction), removed from the Kafka connector for Flink 2",
        "stop the 1.x job with --drain so that its transactions commit, then use KafkaSink and restore with "
        "--allowNonRestoredState"),
    "Kinesis-Stream-Shard-State": (
        "FlinkKinesisConsumer (SourceFunction), removed from the AWS connectors for Flink 2",
        "use KinesisStreamsSource (it starts from its own positions) and restore with --allowNonRestoredState"),
    "bucket-states": ("StreamingFileSink, removed in Flink 2.0",
                      "stop the 1.x job with --drain, then use FileSink and restore with --allowNonRestoredState"),
    "max-part-counter": ("StreamingFileSink, removed in Flink 2.0",
                         "stop the 1.x job with --drain, then use FileSink and restore with --allowNonRestoredState"),
    "file-monitoring-state": ("ContinuousFileMonitoringFunction (readFile), removed in Flink 2.0",
                              "use FileSource with monitorContinuously and restore with --allowNonRestoredState"),
    "stateful-sequence-source-state": ("StatefulSequenceSource, removed in Flink 2.0",
                                       "use NumberSequenceSource or DataGeneratorSource and restore with "
                                       "--allowNonRestoredState"),
}
_TARGET = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?$")


@dataclass(frozen=True)
class FlinkUpgradeFinding:
    """One state Flink 2 will not restore (or that statekit could not check).

    Attributes:
        operator: The operator's uid or id.
        state: The state name.
        kind: ``kryo2``, ``scala``, ``legacy-snapshot``, ``legacy-connector`` or ``unknown``.
        reason: Why, naming the class.
        way_out: What to do about it.
    """

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("blocking",))

    operator: str
    state: str
    kind: str
    reason: str
    way_out: str

    @property
    def blocking(self) -> bool:
        """False for ``unknown`` findings (not checked, not known to fail)."""
        return self.kind != "unknown"


@dataclass(frozen=True)
class FlinkUpgradeReport:
    """The result of ``check --target-flink``."""

    json_shape: ClassVar[JsonShape] = JsonShape(rename={"target": "target_flink"}, extra=("engine", "compatible"))

    path: str
    target: str
    metadata_version: int
    written_by: str
    states_checked: int
    findings: tuple[FlinkUpgradeFinding, ...]

    @property
    def compatible(self) -> bool:
        """True when no state is known to fail the restore."""
        return not any(f.blocking for f in self.findings)

    @property
    def engine(self) -> str:
        """``flink``: the snapshot's engine."""
        return "flink"


def _classes(node: SerializerNode | None) -> list[SerializerNode]:
    """Every snapshot of a tree, POJO subclasses included, depth first."""
    if node is None:
        return []
    out = [node]
    for child in node.children:
        out += _classes(child)
    for _, sub in node.subclasses:
        out += _classes(sub)
    return out


def _state_findings(operator: str, state: FlinkStateMeta, flink1: bool) -> list[FlinkUpgradeFinding]:
    findings = []
    nodes = [n for ser in state.serializers for n in _classes(ser.tree)]
    kryo = [n for n in nodes if n.snapshot_class in KRYO_SNAPSHOTS]
    if kryo and flink1:
        classes = ", ".join(dict.fromkeys(n.text or "?" for n in kryo))
        findings.append(FlinkUpgradeFinding(operator, state.name, "kryo2",
                                            f"values of {classes} are serialized by Kryo 2 (Flink 1.x); Flink 2 "
                                            "reads Kryo state with Kryo 5", KRYO_WAY_OUT))
    scala = list(dict.fromkeys(n.snapshot_class for n in nodes if n.snapshot_class.startswith(SCALA_PACKAGE)))
    if scala:
        findings.append(FlinkUpgradeFinding(operator, state.name, "scala",
                                            f"serialized by the Scala API ({', '.join(scala)}), removed in Flink 2.0",
                                            SCALA_WAY_OUT))
    legacy = list(dict.fromkeys(n.snapshot_class for n in nodes if n.snapshot_class.endswith("ConfigSnapshot")))
    if legacy:
        findings.append(FlinkUpgradeFinding(operator, state.name, "legacy-snapshot",
                                            f"legacy serializer snapshot {', '.join(legacy)} "
                                            "(TypeSerializerConfigSnapshot), which Flink 2.0 no longer reads",
                                            LEGACY_SNAPSHOT_WAY_OUT))
    if state.problem:
        scala_problem = SCALA_PACKAGE in state.problem
        findings.append(FlinkUpgradeFinding(
            operator, state.name, "scala" if scala_problem else "unknown",
            f"serializer snapshots not read: {state.problem}",
            SCALA_WAY_OUT if scala_problem else "check it by restoring in a Flink 2 test cluster"))
    return findings


def _target(target: str) -> str:
    match = _TARGET.match(target.strip())
    if match is None or int(match.group(1)) < 2:
        raise BadInputError(f"--target-flink {target!r}: give a Flink 2 release such as 2.3 (the check names the "
                            "state that Flink 2 no longer restores)")
    return target.strip()


def check_flink_upgrade(path: str, target: str, *, uids: tuple[str, ...] = ()) -> FlinkUpgradeReport:
    """Scan a Flink snapshot for state that Flink ``target`` (2.x) will not restore.

    Args:
        path: A Flink savepoint or checkpoint (directory or ``_metadata``).
        target: The Flink release to move to, ``2.0`` or later.
        uids: Operator uids to label operators with (metadata v3/v4 records none).

    Raises:
        BadInputError: A target before 2.0.
        StatekitError: The snapshot cannot be opened.
    """
    from statekit.flink.snapshot import open_flink_snapshot
    from statekit.flink.summary import keyed_state_meta

    version = _target(target)
    snapshot = open_flink_snapshot(path, uids=uids)
    flink1 = snapshot.metadata.version in FLINK1_METADATA_VERSIONS
    written_by = "Flink 1.x" if flink1 else "Flink 2.x"
    findings: list[FlinkUpgradeFinding] = []
    checked = 0
    for op in snapshot.metadata.operators:
        states, problem = keyed_state_meta(snapshot, op)
        if problem and not states:
            findings.append(FlinkUpgradeFinding(op.label, "*", "unknown", problem,
                                                "check it by restoring in a Flink 2 test cluster"))
        for state in states:
            checked += 1
            findings += _state_findings(op.label, state, flink1)
        names = {s.name for sub in op.subtasks for h in sub.operator_handles for s in h.states}
        for name in sorted(names):
            checked += 1
            legacy = LEGACY_OPERATOR_STATES.get(name)
            if legacy is not None:
                findings.append(FlinkUpgradeFinding(op.label, name, "legacy-connector",
                                                    f"operator state of {legacy[0]}", legacy[1]))
    return FlinkUpgradeReport(snapshot.path, version, snapshot.metadata.version, written_by, checked,
                              tuple(findings))
