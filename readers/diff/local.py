"""The local engine: :class:`DiffInputs` opens both savepoints and plans; :func:`diff_locally` compares state by state."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from statekit.readers.diff.aligned import diff_aligned
from statekit.readers.diff.join import Counts
from statekit.readers.diff.operator_state import diff_operator_state
from statekit.readers.diff.plan import DiffPlan, StatePair, plan_diff, state_entries
from statekit.readers.diff.regrouped import diff_by_hash
from statekit.readers.diff.results import SavepointDiff, StateDiff
from statekit.readers.diff.rows import DifferenceSink
from statekit.readers.diff.spec import DifferenceOutput, DiffSpec
from statekit.readers.progress import Advance, ProgressFactory, no_progress
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    pass

__all__ = ["DiffInputs", "diff_locally", "status_of"]


@dataclass(frozen=True)
class DiffInputs:
    """Both savepoints of a :class:`DiffSpec` opened and the plan made: every input check,
    done before any engine starts (any failure is bad input: exit 2)."""

    spec: DiffSpec
    a: SavepointReader
    b: SavepointReader
    plan: DiffPlan

    @classmethod
    def open(cls, spec: DiffSpec) -> DiffInputs:
        if spec.limit < 0:
            raise BadInputError(f"--limit must not be negative, got {spec.limit}")
        # a native snapshot is compared through its canonical view (statekit.readers.native_view)
        a = SavepointReader.read(spec.a, trust_pickle=spec.trust_pickle, storage_options=spec.storage_options).canonical()
        b = SavepointReader.read(spec.b, trust_pickle=spec.trust_pickle, storage_options=spec.storage_options).canonical()
        return cls(spec, a, b, plan_diff(a, b, spec.operator, spec.state))

    def codecs(self, pair: StatePair) -> tuple[StateCodec | None, StateCodec | None]:
        """The codec of ``pair`` on each side (None where the state does not exist)."""
        return (self.a.codec(pair.uid, pair.name) if pair.a is not None else None,
                self.b.codec(pair.uid, pair.name) if pair.b is not None else None)


def diff_locally(inputs: DiffInputs, differences: DifferenceOutput | None = None,
                 progress: ProgressFactory | None = None) -> SavepointDiff:
    """Diff on this machine, streaming with bounded memory.

    Args:
        inputs: The opened savepoints and the plan.
        differences: Where every differing entry goes (``spec.output``'s writer), or None.
        progress: ``Output.progress``-like factory, advanced once per state.
    """
    total = len(inputs.plan.pairs)
    with (progress or no_progress)(f"comparing {total} state(s)", total=total, unit="items") as advance:
        states = tuple(_diff_state(inputs, pair, differences, advance) for pair in inputs.plan.pairs)
    return SavepointDiff(inputs.a.path, inputs.b.path, "local", inputs.plan.structural, states)


def _diff_state(inputs: DiffInputs, pair: StatePair, differences: DifferenceOutput | None,
                advance: Advance) -> StateDiff:
    reason = pair.incomparable_reason()
    if reason is not None:
        result = StateDiff(pair.uid, pair.name, pair.descriptor.kind.value, "incomparable", reason=reason)
    else:
        result = _compare(inputs, pair, differences)
    advance(f"{pair.uid}/{pair.name}", 1)
    return result


def status_of(pair: StatePair) -> str:
    return "added" if pair.a is None else "removed" if pair.b is None else "compared"


def _compare(inputs: DiffInputs, pair: StatePair, differences: DifferenceOutput | None) -> StateDiff:
    ra, rb, keys = inputs.a, inputs.b, inputs.spec.keys
    status = status_of(pair)
    kind = pair.descriptor.kind.value
    decode = keys or differences is not None
    if status != "compared" and not decode:
        return StateDiff(pair.uid, pair.name, kind, status, only_in_a=state_entries(ra, pair.op_a, pair.a),
                         only_in_b=state_entries(rb, pair.op_b, pair.b))
    counts = Counts()
    max_p = (pair.op_a or pair.op_b).max_parallelism  # type: ignore[union-attr]
    opened = differences.state_writer(pair.uid, pair.name) if differences is not None else nullcontext(None)
    with opened as writer:
        sink = None
        if decode:
            codec_a, codec_b = inputs.codecs(pair)
            sink = DifferenceSink(pair, codec_a, codec_b, limit=inputs.spec.limit if keys else 0, writer=writer,
                                  max_parallelism=max_p)
        if not pair.keyed:
            counts = diff_operator_state(ra if pair.a else None, rb if pair.b else None, pair, sink)
        elif status == "compared" and pair.op_a is not None and pair.op_b is not None \
                and pair.op_a.max_parallelism != pair.op_b.max_parallelism:
            diff_by_hash(ra, rb, pair, counts, sink)
        else:
            diff_aligned(ra if pair.a else None, rb if pair.b else None, pair, counts, sink)
    return StateDiff(pair.uid, pair.name, kind, status, counts.only_in_a, counts.only_in_b, counts.changed,
                     counts.unchanged, counts.skipped, counts.compared,
                     examples=tuple(sink.examples) if sink is not None else ())
