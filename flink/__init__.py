"""Read Apache Flink snapshots (``_metadata`` v3-v7) without a JVM.

Entry points:
    * bytes: :func:`read_flink_metadata`, :func:`is_flink_metadata`,
      :func:`relocate_flink_metadata`, :func:`read_keyed_backend_meta`;
    * paths: :func:`open_flink_snapshot`, :func:`list_flink_checkpoints`,
      :func:`inspect_flink_snapshot`, :func:`verify_flink_snapshot`,
      :func:`plan_flink_dispose`, :func:`dispose_flink_snapshot`;
    * keys: :func:`assign_to_key_group_flink` and Java ``hashCode`` helpers;
    * state: :func:`read_keyed_state` (canonical savepoints, native savepoints, incremental
      RocksDB checkpoints), :func:`decodable_states`, :func:`count_savepoint_entries`;
    * uids: :func:`operator_id_for_uid` (label operators of metadata v3/v4 with ``uids=``).

Every name is imported on its first use (PEP 562): importing one submodule, as the CLI
does for every command, does not load the whole reader.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statekit.flink.entries import (
        FlinkEntryCounts,
        FlinkKeyedEntry,
        count_savepoint_entries,
        decodable_states,
        read_keyed_state,
        read_savepoint_entries,
    )
    from statekit.flink.keygroups import (
        assign_key_to_operator_flink,
        assign_to_key_group_flink,
        flink_murmur_hash,
        java_hash_code,
    )
    from statekit.flink.metadata import is_flink_metadata, read_flink_metadata
    from statekit.flink.model import (
        CheckpointProperties,
        FlinkCheckpointMetadata,
        FlinkOperatorState,
        FlinkSubtaskState,
        KeyedHandleKind,
        KeyedStateHandle,
        OperatorStateHandle,
        StreamHandle,
        StreamHandleKind,
    )
    from statekit.flink.relocate import relocate_flink_metadata
    from statekit.flink.snapshot import (
        FlinkCheckpointEntry,
        FlinkDisposePlan,
        FlinkDisposeResult,
        FlinkFileRef,
        FlinkProblem,
        FlinkSnapshot,
        FlinkSnapshotSummary,
        dispose_flink_snapshot,
        flink_referenced_files,
        inspect_flink_snapshot,
        list_flink_checkpoints,
        open_flink_snapshot,
        plan_flink_dispose,
        verify_flink_snapshot,
    )
    from statekit.flink.state_meta import FlinkStateMeta, read_keyed_backend_meta
    from statekit.flink.uids import operator_id_for_uid

_MODULE_OF: dict[str, str] = {
    "FlinkEntryCounts": "statekit.flink.entries",
    "FlinkKeyedEntry": "statekit.flink.entries",
    "count_savepoint_entries": "statekit.flink.entries",
    "decodable_states": "statekit.flink.entries",
    "read_keyed_state": "statekit.flink.entries",
    "read_savepoint_entries": "statekit.flink.entries",
    "assign_key_to_operator_flink": "statekit.flink.keygroups",
    "assign_to_key_group_flink": "statekit.flink.keygroups",
    "flink_murmur_hash": "statekit.flink.keygroups",
    "java_hash_code": "statekit.flink.keygroups",
    "is_flink_metadata": "statekit.flink.metadata",
    "read_flink_metadata": "statekit.flink.metadata",
    "CheckpointProperties": "statekit.flink.model",
    "FlinkCheckpointMetadata": "statekit.flink.model",
    "FlinkOperatorState": "statekit.flink.model",
    "FlinkSubtaskState": "statekit.flink.model",
    "KeyedHandleKind": "statekit.flink.model",
    "KeyedStateHandle": "statekit.flink.model",
    "OperatorStateHandle": "statekit.flink.model",
    "StreamHandle": "statekit.flink.model",
    "StreamHandleKind": "statekit.flink.model",
    "relocate_flink_metadata": "statekit.flink.relocate",
    "FlinkCheckpointEntry": "statekit.flink.snapshot",
    "FlinkDisposePlan": "statekit.flink.snapshot",
    "FlinkDisposeResult": "statekit.flink.snapshot",
    "FlinkFileRef": "statekit.flink.snapshot",
    "FlinkProblem": "statekit.flink.snapshot",
    "FlinkSnapshot": "statekit.flink.snapshot",
    "FlinkSnapshotSummary": "statekit.flink.snapshot",
    "dispose_flink_snapshot": "statekit.flink.snapshot",
    "flink_referenced_files": "statekit.flink.snapshot",
    "inspect_flink_snapshot": "statekit.flink.snapshot",
    "list_flink_checkpoints": "statekit.flink.snapshot",
    "open_flink_snapshot": "statekit.flink.snapshot",
    "plan_flink_dispose": "statekit.flink.snapshot",
    "verify_flink_snapshot": "statekit.flink.snapshot",
    "FlinkStateMeta": "statekit.flink.state_meta",
    "read_keyed_backend_meta": "statekit.flink.state_meta",
    "operator_id_for_uid": "statekit.flink.uids",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "read_flink_metadata",
    "is_flink_metadata",
    "relocate_flink_metadata",
    "read_keyed_backend_meta",
    "open_flink_snapshot",
    "list_flink_checkpoints",
    "inspect_flink_snapshot",
    "verify_flink_snapshot",
    "flink_referenced_files",
    "plan_flink_dispose",
    "dispose_flink_snapshot",
    "count_savepoint_entries",
    "FlinkEntryCounts",
    "read_keyed_state",
    "read_savepoint_entries",
    "operator_id_for_uid",
    "decodable_states",
    "FlinkKeyedEntry",
    "assign_to_key_group_flink",
    "assign_key_to_operator_flink",
    "flink_murmur_hash",
    "java_hash_code",
    "CheckpointProperties",
    "FlinkCheckpointMetadata",
    "FlinkOperatorState",
    "FlinkSubtaskState",
    "KeyedHandleKind",
    "KeyedStateHandle",
    "OperatorStateHandle",
    "StreamHandle",
    "StreamHandleKind",
    "FlinkSnapshot",
    "FlinkFileRef",
    "FlinkCheckpointEntry",
    "FlinkProblem",
    "FlinkDisposePlan",
    "FlinkDisposeResult",
    "FlinkSnapshotSummary",
    "FlinkStateMeta",
]
