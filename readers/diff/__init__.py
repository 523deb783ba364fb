"""Diff of two savepoints: structural (operators, states, descriptors, layout) and data.

Modules, in dependency order: ``spec`` (what to compare, where rows go), ``results``,
``plan`` (operators and states paired), ``rows`` (differing entries as rows),
``value_form``, ``join`` (two tables compared), ``aligned`` and ``regrouped`` (keyed state at
the same / different max parallelism), ``operator_state``, ``local`` (the local engine).

A is "before", B is "after": an operator or state only in B is *added*, only in A *removed*.
Data is compared per state by entry identity — (key, namespace, user key) as stored bytes —
and value bytes: an entry is *only in A*, *only in B*, *changed* or *unchanged*. Expiry is
not part of the comparison (it moves on its own). A window state's namespace is its window
(:mod:`statekit.readers.window_state`), so window state compares per (key, window) and each
differing example names its ``window``. Identity does not depend on files or
parallelism, so a savepoint and its rescaled copy compare equal.

A :class:`DiffSpec` says what to compare; :meth:`DiffInputs.open` opens both savepoints and
makes the plan (every input check, shared by both engines). The local engine
(:func:`diff_locally`) streams:

* same max parallelism: both sides' blocks in key-group order; a key group whose blocks
  have equal CRC-32, length and entry count on both sides is counted unchanged without
  being decoded — after both blocks' bytes are read and checked against those CRC-32s (the
  index itself is checked against ``_metadata`` when the file opens), so a damaged copy is
  never "unchanged": it fails naming the file and key group; other key groups are compared in chunks of about
  :data:`CHUNK_ROWS` rows — row by row where both blocks hold the same identities in the
  same order, by a join otherwise;
* different max parallelism: by buckets of ``key_hash % g`` where ``g`` divides both max
  parallelisms (the key groups ``b, b + g, ...`` of each side, read straight from the
  files) when such a bucket is at most :data:`BUCKET_BYTES`; else entries are spilled into
  hash buckets of that size. Both sides of a bucket are put in identity order (key hash,
  key, namespace, user key) as permutations; when they hold the same identities, side b's
  rows are gathered into side a's order and compared row by row, else the bucket is joined.

Values are compared as stored: typed columns of one primitive type directly, anything else
as serialized bytes (:class:`ValueForm`). Memory stays bounded by a chunk (or a bucket)
plus one block. Operator state is compared as
a multiset of elements (list, union) or by broadcast key. Layout changes (parallelism, max
parallelism, operator name) are listed but do not make the savepoints different.

The package only reads: differing entries go, as rows of :func:`diff_arrow_schema`, to a
:class:`DifferenceOutput` the caller gives (``statekit.writers.diff_output`` writes them as
Parquet for ``diff -o``); the hash join parks rows in process-private scratch files
(:class:`statekit.statefmt.spill.ArrowSpill`).
"""

from __future__ import annotations

from statekit.readers.diff.local import DiffInputs, diff_locally
from statekit.readers.diff.operator_state import diff_operator_state
from statekit.readers.diff.plan import DiffPlan, StatePair, plan_diff
from statekit.readers.diff.results import KeyDifference, SavepointDiff, StateDiff, StructuralChange
from statekit.readers.diff.rows import DIFF_COLUMNS, DifferenceSink, diff_arrow_schema
from statekit.readers.diff.spec import DifferenceOutput, DifferenceWriter, DiffSpec

__all__ = [
    "DiffSpec",
    "DiffInputs",
    "DifferenceWriter",
    "DifferenceOutput",
    "StructuralChange",
    "KeyDifference",
    "StateDiff",
    "SavepointDiff",
    "DiffPlan",
    "StatePair",
    "diff_locally",
    "plan_diff",
    "diff_operator_state",
    "diff_arrow_schema",
    "DifferenceSink",
    "DIFF_COLUMNS",
]
