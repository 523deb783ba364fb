"""Operator ids from uids: label operators of metadata that records no uids (v3, v4).

Flink derives the id of an operator with a user-set uid from the uid alone
(``StreamGraphHasherV2.generateUserSpecifiedHash``): Guava's ``murmur3_128`` (seed 0) of
the uid's UTF-8 bytes, whose 16 bytes are the operator id in order (``_metadata`` writes
them as two longs). So a uid names exactly one operator id, and a user who knows the uids
of a job can label the operators of a snapshot whose metadata stores none.

Invariant: :func:`operator_id_for_uid` equals the id Flink gives an operator with that uid;
labelling never changes an operator whose metadata already records a uid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import mmh3

from statekit.flink.model import FlinkCheckpointMetadata
from statekit.statefmt.errors import BadInputError

__all__ = ["operator_id_for_uid", "label_operators", "unmatched_uids"]


def operator_id_for_uid(uid: str) -> str:
    """The operator id (32 hex digits) Flink gives an operator whose uid is ``uid``.

    Example:
        >>> operator_id_for_uid("running-count")
        '569cdc4a96621daa7af4c159b985695c'
    """
    if not uid:
        raise BadInputError("an operator uid must not be empty")
    return bytes(mmh3.hash_bytes(uid.encode("utf-8"), 0, x64arch=True)).hex()


def label_operators(metadata: FlinkCheckpointMetadata, uids: Iterable[str]) -> FlinkCheckpointMetadata:
    """``metadata`` with the uid set on every operator whose id is the hash of a given uid.

    Operators that already record a uid keep it (it hashes to their id by construction).
    """
    by_id = {operator_id_for_uid(uid): uid for uid in uids}
    if not by_id:
        return metadata
    operators = tuple(
        replace(op, uid=by_id[op.operator_id]) if op.uid is None and op.operator_id in by_id else op
        for op in metadata.operators
    )
    return replace(metadata, operators=operators)


def unmatched_uids(metadata: FlinkCheckpointMetadata, uids: Iterable[str]) -> list[str]:
    """The given uids that name no operator of ``metadata``."""
    ids = {op.operator_id for op in metadata.operators}
    return [uid for uid in uids if operator_id_for_uid(uid) not in ids]
