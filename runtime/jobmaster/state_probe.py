"""The states a job declares, found without running it.

A state is declared when a function asks for it: keyed state in ``open()`` (through the
runtime context), operator state in ``initialize_state()`` (a CheckpointedFunction, a source
reader). :func:`declared_states` creates one throw-away instance of every operator (subtask 0,
its resolved parallelism, an in-memory keyed backend, nothing restored), lets it declare its
state exactly as a task would, and records the descriptors. No record is processed, no timer
fires, no checkpoint is taken. A two-phase-commit sink is not initialized (that would recover
and begin transactions): its ``state_descriptor()`` is recorded instead.

States a function asks for only while it processes records (e.g. broadcast state read in
``process_broadcast_element``, timers) are not seen; a snapshot's state of that kind is
reported as *undeclared* (restored and carried into later snapshots unchanged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from statekit.runtime.connectors.two_phase_commit import TwoPhaseCommitSink
from statekit.runtime.dataflow.graph import JobGraph, OperatorNode
from statekit.runtime.operators.base import OperatorContext, Output, StreamOperator
from statekit.runtime.state.backend import DEFAULT_STATE_BACKEND
from statekit.statefmt.errors import BadInputError, StatekitError
from statekit.statefmt.metadata import StateDescriptor, StateKind

__all__ = [
    "DeclaredOperator",
    "declared_states",
]

log = logging.getLogger("statekit.runtime")

_PROBE_JOB_ID = "0" * 32


@dataclass(frozen=True)
class DeclaredOperator:
    """One operator of a job as a restore sees it: uid, parallelism, key, declared states."""

    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    explicit_max_parallelism: bool
    keyed: bool
    key_serializer: str | None
    states: tuple[StateDescriptor, ...]

    def state(self, name: str) -> StateDescriptor | None:
        return next((d for d in self.states if d.name == name), None)


def declared_states(graph: JobGraph) -> list[DeclaredOperator]:
    """Every operator of ``graph`` with the states it declares when it starts.

    Raises:
        StatekitError: A function's ``open()``/``initialize_state()`` raised one (e.g. an
            input directory that does not exist).
        BadInputError: A function raised anything else while declaring its state.
    """
    return [_declared(node) for node in graph.operators]


def _declared(node: OperatorNode) -> DeclaredOperator:
    states = _probe(node)
    return DeclaredOperator(
        uid=node.uid,
        name=node.name,
        parallelism=node.parallelism,
        max_parallelism=node.max_parallelism,
        explicit_max_parallelism=node.transformation.max_parallelism is not None,
        keyed=node.keyed,
        key_serializer=node.key_serializer if node.keyed else None,
        states=tuple(states),
    )


def _probe(node: OperatorNode) -> list[StateDescriptor]:
    operator = node.transformation.factory()
    operator.setup(_context(node), Output(lambda _value: None))
    try:
        if isinstance(operator.function, TwoPhaseCommitSink):
            descriptor = operator.function.state_descriptor().to_metadata(StateKind.UNION)
            operator.initialize_function = lambda: None  # type: ignore[method-assign]
            operator.initialize_state()
            return [*_descriptors(operator), descriptor]
        operator.initialize_state()
        operator.open()
        return _descriptors(operator)
    except StatekitError:
        raise
    except Exception as exc:
        raise BadInputError(
            f"operator {node.uid!r}: declaring its state failed: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        _close(operator, node.uid)


def _context(node: OperatorNode) -> OperatorContext:
    return OperatorContext(
        uid=node.uid, name=node.name, subtask=0, parallelism=node.parallelism,
        max_parallelism=node.max_parallelism, state_backend=DEFAULT_STATE_BACKEND,
        key_selector=node.key_selector, key_serializer=node.key_serializer, job_id=_PROBE_JOB_ID,
    )


def _descriptors(operator: StreamOperator) -> list[StateDescriptor]:
    keyed = operator.keyed_backend.descriptors() if operator.keyed_backend is not None else []
    return keyed + operator.operator_state.descriptors()


def _close(operator: StreamOperator, uid: str) -> None:
    if isinstance(operator.function, TwoPhaseCommitSink):
        if operator.keyed_backend is not None:
            operator.keyed_backend.close()
        return
    try:
        operator.close()
    except Exception as exc:  # noqa: BLE001 - closing a probe never fails the check
        log.debug("closing the state probe of %s failed: %s", uid, exc)
