"""Regroup canonical key-group streams a key group at a time with NumPy: the fast path of a rescale.

:class:`~statekit.flink.regroup.Regrouper` reads entries one by one in Python (about 1 µs
each). This module does the same work on whole key groups (*blocks*) with array operations:

1. **parse** — entries carry their lengths, so where one starts depends on the one before.
   Every byte position that could start an entry is a *candidate*: the key-group prefix
   (flag cleared) sits 4 bytes after it and the key length before it is below 64 KiB. For
   each candidate the position of the entry after it follows from its two lengths (plus 2
   for a state id or end mark after a flagged entry). True entries form the chain from the
   block's first entry to its end; every other candidate is pruned by *in-degree*: the
   chain's entries point only at each other, so a candidate nothing points at (except the
   first) is not an entry, and pruning repeats until nothing changes (positions only grow,
   so false chains always have a head). The survivors must form exactly one chain that ends
   at the block's end; otherwise (a key of 64 KiB or more) the block goes to the Python path.
2. **hash** (only when ``M2`` does not divide ``M``) — Java ``hashCode`` of the keys, as
   :mod:`statekit.flink.key_hash` computes it, vectorized for keys of ``String``, ``Long``,
   ``Integer``, one-field ``Row`` s of them (PyFlink's keys) and SQL ``BinaryRowData`` (the
   murmur word hash over the keys of one size at a time), then Flink's
   ``murmurHash % M2`` (:func:`murmur_hash_array`); other keys are hashed one by one. When
   ``M2`` divides ``M`` a key's new key group is its old one modulo ``M2``
   (``(h % M) % M2 == h % M2``): nothing is hashed.
3. **regroup** — entries are stably sorted by (new key group, state) and rewritten in one
   gather (new key-group prefix, of 1 or 2 bytes, flag cleared; everything after the prefix
   copied), and each (new key group, state) run goes to the :class:`Regrouper` as a whole
   (:meth:`Regrouper.add_run`), which spills and frames as before.

Invariant: the streams written are byte for byte those of the Python path (checked in the
tests on real Flink savepoints and on generated ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.flink.key_hash import ROW_DATA_SEED, binary_row_fixed_size
from statekit.flink.sources import END_OF_KEY_GROUP_MARK, META_FOLLOWS

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from statekit.flink.key_hash import KeyHasher
    from statekit.flink.regroup import Regrouper, StreamInput

__all__ = ["BlockEntries", "parse_block", "murmur_hash_array", "java_hashes", "regroup_block", "VECTOR_KEYS"]

TIMER_TIMESTAMP_BYTES = 8
MAX_PRUNE_ROUNDS = 4
VECTOR_KEYS = ("String", "Long", "Integer", "Row<String>", "Row<Long>", "Row<Integer>")


@dataclass(frozen=True)
class BlockEntries:
    """The entries of one block: start, key length, value length and state id of each, in order."""

    starts: npt.NDArray[np.int64]
    key_lengths: npt.NDArray[np.int64]
    value_lengths: npt.NDArray[np.int64]
    states: npt.NDArray[np.int64]


def _be32(b: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    import numpy as np

    return ((b[at].astype(np.int64) << 24) | (b[at + 1].astype(np.int64) << 16)
            | (b[at + 2].astype(np.int64) << 8) | b[at + 3].astype(np.int64))


def parse_block(data: bytes | memoryview, key_group: int, prefix: int) -> BlockEntries | None:
    """The entries of one key group's bytes (state id, entries, ..., end mark), or ``None``
    when they cannot be parsed this way (then the caller reads them one by one)."""
    import numpy as np

    b = np.frombuffer(data, np.uint8)
    size = len(b)
    if size < 2 + 8 + prefix + 2:
        return None
    high = (key_group >> 8) if prefix == 2 else key_group
    n = size - 8
    mask = (b[4:4 + n] & 0x7F) == high
    mask &= b[:n] == 0
    mask &= b[1:1 + n] == 0
    if prefix == 2:
        mask &= b[5:5 + n] == (key_group & 0xFF)
    cand = np.flatnonzero(mask)
    if not len(cand):
        return None
    key_lengths = (b[cand + 2].astype(np.int64) << 8) | b[cand + 3]
    value_at = cand + 4 + key_lengths
    fits = (key_lengths >= prefix) & (value_at + 4 <= size)
    cand, key_lengths, value_at = cand[fits], key_lengths[fits], value_at[fits]
    value_lengths = _be32(b, value_at)
    flagged = (b[cand + 4] & META_FOLLOWS) > 0
    after = value_at + 4 + value_lengths
    nxt = after + 2 * flagged
    keep = (value_lengths >= 0) & (after <= size - 2 * flagged)
    cand, key_lengths, value_lengths, flagged, nxt = (cand[keep], key_lengths[keep], value_lengths[keep],
                                                      flagged[keep], nxt[keep])
    for _ in range(MAX_PRUNE_ROUNDS):
        pointed = np.zeros(size + 1, bool)
        pointed[nxt] = True
        pointed[2] = True  # the first entry, after the first state id
        alive = pointed[cand]
        if alive.all():
            break
        cand, key_lengths, value_lengths, flagged, nxt = (cand[alive], key_lengths[alive], value_lengths[alive],
                                                          flagged[alive], nxt[alive])
    else:  # dense candidates (a key group id that is a common byte): follow the chain by pointer doubling
        on_chain = _chain(cand, nxt, size)
        if on_chain is None:
            return None
        cand, key_lengths, value_lengths, flagged, nxt = (cand[on_chain], key_lengths[on_chain],
                                                          value_lengths[on_chain], flagged[on_chain], nxt[on_chain])
    if not len(cand) or cand[0] != 2 or nxt[-1] != size or (len(cand) > 1 and not (nxt[:-1] == cand[1:]).all()):
        return None
    mark_at = cand[flagged] + 8 + key_lengths[flagged] + value_lengths[flagged]
    marks = (b[mark_at].astype(np.int64) << 8) | b[mark_at + 1]
    if marks[-1] != END_OF_KEY_GROUP_MARK or not flagged[-1] or (marks[:-1] == END_OF_KEY_GROUP_MARK).any():
        return None
    first_state = (int(b[0]) << 8) | int(b[1])
    run_states = np.concatenate(([first_state], marks[:-1]))
    run = np.concatenate(([0], np.cumsum(flagged[:-1], dtype=np.int64)))
    return BlockEntries(cand, key_lengths, value_lengths, run_states[run])


def _chain(cand: npt.NDArray[np.int64], nxt: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.bool_] | None:
    """Which candidates lie on the chain from the entry at 2: nodes within 2^k steps, doubling k."""
    import numpy as np

    count = len(cand)
    index = np.full(size + 1, count, np.int64)
    index[cand] = np.arange(count)
    root = index[2]
    if root == count:
        return None
    jump = np.append(index[nxt], count)  # count: past the end, or not a candidate
    reach = np.zeros(count + 1, bool)
    reach[root] = True
    frontier = np.array([root])
    while True:
        found = jump[frontier]
        found = found[~reach[found]]
        if not len(found):
            break
        reach[found] = True
        frontier = np.flatnonzero(reach[:count])
        jump = jump[jump]
    return reach[:count]


# ----------------------------------------------------------------------------- hashing


def murmur_hash_array(codes: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Flink's ``MathUtils.murmurHash`` of each Java int (see :func:`statekit.flink.keygroups.flink_murmur_hash`)."""
    import numpy as np

    with np.errstate(over="ignore"):
        k = codes.astype(np.uint32) * np.uint32(0xCC9E2D51)
        k = (k << np.uint32(15)) | (k >> np.uint32(17))
        k = k * np.uint32(0x1B873593)
        k = (k << np.uint32(13)) | (k >> np.uint32(19))
        k = k * np.uint32(5) + np.uint32(0xE6546B64)
        k ^= np.uint32(4)
        k ^= k >> np.uint32(16)
        k = k * np.uint32(0x85EBCA6B)
        k ^= k >> np.uint32(13)
        k = k * np.uint32(0xC2B2AE35)
        k ^= k >> np.uint32(16)
    signed = k.view(np.int32).astype(np.int64)
    return np.where(signed >= 0, signed, np.where(signed == -(1 << 31), 0, -signed))


def _string_hashes(b: npt.NDArray[np.uint8], at: npt.NDArray[np.int64],
                   ends: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32] | None:
    """``String.hashCode`` of Flink strings at ``at`` (one-byte length, ASCII, inside ``ends``), or ``None``."""
    import numpy as np

    if not len(at):
        return np.zeros(0, np.uint32)
    if (at >= ends).any():
        return None
    head = b[at].astype(np.int64)
    if (head == 0).any() or (head >= 0x80).any() or (at + head > ends).any():
        return None
    lengths = head - 1
    total = int(lengths.sum())
    sums = np.zeros(len(at), np.uint32)
    if not total:
        return sums
    starts = np.cumsum(lengths) - lengths
    steps = _steps(total)
    chars = b[np.repeat(at + 1 - starts, lengths) + steps]
    if (chars >= 0x80).any():
        return None
    exponents = np.repeat(starts + lengths - 1, lengths) - steps
    with np.errstate(over="ignore"):
        weighted = chars.astype(np.uint32) * _powers(int(lengths.max()))[exponents]
    filled = lengths > 0
    sums[filled] = np.add.reduceat(weighted, starts[filled], dtype=np.uint32)
    return sums


_POWERS: list[Any] = []


def _powers(length: int) -> npt.NDArray[np.uint32]:
    import numpy as np

    if not _POWERS or len(_POWERS[0]) < length + 1:
        size = max(length + 1, 256)
        out = np.ones(size, np.uint32)
        with np.errstate(over="ignore"):
            for i in range(1, size):
                out[i] = out[i - 1] * np.uint32(31)
        _POWERS[:] = [out]
    powers: npt.NDArray[np.uint32] = _POWERS[0]
    return powers


def _rotl(k: npt.NDArray[np.uint32], r: int) -> npt.NDArray[np.uint32]:
    import numpy as np

    return (k << np.uint32(r)) | (k >> np.uint32(32 - r))


def _binary_row_hashes(b: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
                       arity: int) -> npt.NDArray[np.uint32] | None:
    """``BinaryRowData.hashCode`` of the SQL rows at ``at`` (int size, then the row), or ``None``
    when one does not fit: the rows of each size as one matrix of little-endian words."""
    import numpy as np

    if (at + 4 > ends).any():
        return None
    sizes = _be32(b, at)
    if ((sizes < binary_row_fixed_size(arity)) | (sizes % 4 != 0) | (at + 4 + sizes > ends)).any():
        return None
    hashes = np.empty(len(at), np.uint32)
    with np.errstate(over="ignore"):
        for size in np.unique(sizes).tolist():
            rows = np.flatnonzero(sizes == size)
            words = b[(at[rows] + 4)[:, None] + _steps(size)].view("<u4")  # (rows, size / 4)
            h = np.full(len(rows), ROW_DATA_SEED, np.uint32)
            for column in range(size // 4):
                k = _rotl(words[:, column].astype(np.uint32) * np.uint32(0xCC9E2D51), 15) * np.uint32(0x1B873593)
                h = _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
            h ^= np.uint32(size)
            h ^= h >> np.uint32(16)
            h = h * np.uint32(0x85EBCA6B)
            h ^= h >> np.uint32(13)
            h = h * np.uint32(0xC2B2AE35)
            h ^= h >> np.uint32(16)
            hashes[rows] = h
    return hashes


def java_hashes(b: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], key_type: str,
                ends: npt.NDArray[np.int64] | None = None, row_arity: int | None = None) -> npt.NDArray[np.uint32] | None:
    """Java ``hashCode`` (as uint32) of the keys at ``at`` (each ending before ``ends``), or ``None``
    (not vectorized, or a key that does not fit: hash one by one, which names the damage).
    ``row_arity``: the keys are SQL binary rows of that many fields (``KeyHasher.row_arity``)."""
    import numpy as np

    if ends is None:
        ends = np.full(len(at), len(b), np.int64)
    if row_arity is not None:
        return _binary_row_hashes(b, at, ends, row_arity)
    row = key_type.startswith("Row<")
    inner = key_type[4:-1] if row else key_type
    if row:
        if len(at) and ((at >= ends).any() or (b[np.minimum(at, len(b) - 1)] != 0).any()):  # INSERT, not null
            return None
        at = at + 1
    widths = {"Long": 8, "Integer": 4}
    if inner in widths and (at + widths[inner] > ends).any():
        return None
    if inner == "String":
        hashes = _string_hashes(b, at, ends)
    elif inner == "Long":
        hashes = (_be32(b, at) ^ _be32(b, at + 4)).astype(np.uint32)
    elif inner == "Integer":
        hashes = _be32(b, at).astype(np.uint32)
    else:
        return None
    if hashes is None:
        return None
    if row:  # 31 * RowKind.INSERT + (31 * 1 + (31 + h))
        with np.errstate(over="ignore"):
            hashes = hashes + np.uint32(62)
    return hashes


# ----------------------------------------------------------------------------- regroup


def _new_key_groups(b: npt.NDArray[np.uint8], entries: BlockEntries, key_group: int, prefix: int,
                    old_max_parallelism: int, max_parallelism: int, timers: frozenset[int], hasher: KeyHasher,
                    data: bytes | memoryview, where: str) -> npt.NDArray[np.int64]:
    import numpy as np

    count = len(entries.starts)
    if old_max_parallelism % max_parallelism == 0:
        return np.full(count, key_group % max_parallelism, np.int64)
    skip = np.zeros(count, np.int64)
    if timers:
        skip[np.isin(entries.states, list(timers))] = TIMER_TIMESTAMP_BYTES
    at = entries.starts + 4 + prefix + skip
    ends = entries.starts + 4 + entries.key_lengths
    hashes = java_hashes(b, at, hasher.name, ends, hasher.row_arity) if (at <= ends).all() else None
    if hashes is None:
        raw = bytes(data)
        cache: dict[bytes, int] = {}
        values = np.empty(count, np.uint32)
        for i, (pos, length) in enumerate(zip(at.tolist(), ends.tolist())):
            key = raw[pos:length]
            code = cache.get(key)
            if code is None:
                code = cache[key] = hasher.java_hash(key, 0, where=where)[0]
            values[i] = code
        hashes = values
    return murmur_hash_array(hashes) % max_parallelism


def _merge_in_place(regrouper: Regrouper, b: npt.NDArray[np.uint8], parsed: BlockEntries, key_group: int) -> None:
    """The whole block to one new key group of the same prefix width: the prefixes patched in a
    copy of the block, each state's section one run (no key hashed, no entry moved)."""
    import numpy as np

    out = b.copy()
    prefix = regrouper.new_prefix
    at = parsed.starts + 4
    if prefix == 2:
        out[at] = key_group >> 8
        out[at + 1] = key_group & 0xFF
    else:
        out[at] = key_group
    blob = out.tobytes()
    ends = parsed.starts + 8 + parsed.key_lengths + parsed.value_lengths
    flagged = np.flatnonzero(b[at] & META_FOLLOWS)  # the last entry of each state section
    firsts = np.concatenate(([0], flagged[:-1] + 1))
    for first, last in zip(firsts.tolist(), flagged.tolist()):
        start, end = int(parsed.starts[first]), int(ends[last])
        regrouper.add_run(key_group << 16 | int(parsed.states[first]), blob[start:end],
                          int(parsed.starts[last]) - start, last - first + 1)


_STEPS: list[Any] = []


def _steps(count: int) -> npt.NDArray[np.int64]:
    """``arange(count)``, a view of one array kept between blocks."""
    import numpy as np

    if not _STEPS or len(_STEPS[0]) < count:
        _STEPS[:] = [np.arange(max(count, 1 << 20), dtype=np.int64)]
    steps: npt.NDArray[np.int64] = _STEPS[0][:count]
    return steps


def regroup_block(regrouper: Regrouper, data: bytes | memoryview, key_group: int, entries: StreamInput,
                  where: str) -> bool:
    """Regroup one block into ``regrouper``; ``False`` (nothing added) when it must be read one by one."""
    import numpy as np

    old_prefix = regrouper.old_prefix
    parsed = parse_block(data, key_group, old_prefix)
    if parsed is None:
        return False
    if int(parsed.states.max()) >= len(entries.state_ids):
        return False
    b = np.frombuffer(data, np.uint8)
    states = np.asarray(entries.state_ids, np.int64)[parsed.states]
    parsed = BlockEntries(parsed.starts, parsed.key_lengths, parsed.value_lengths, states)
    regrouper.bytes_read += len(data)
    if regrouper.old_max_parallelism % regrouper.max_parallelism == 0 and regrouper.new_prefix == old_prefix:
        _merge_in_place(regrouper, b, parsed, key_group % regrouper.max_parallelism)
        return True
    new = _new_key_groups(b, parsed, key_group, old_prefix, regrouper.old_max_parallelism, regrouper.max_parallelism,
                          entries.timers, regrouper.hasher, data, where)
    state_count = len(entries.state_ids)
    group = new * state_count + states
    order = np.argsort(group.astype(np.uint16) if regrouper.max_parallelism * state_count <= 1 << 16 else group,
                       kind="stable")
    group = group[order]
    starts, key_lengths, value_lengths = parsed.starts[order], parsed.key_lengths[order], parsed.value_lengths[order]
    new_prefix = regrouper.new_prefix
    head = 4 + new_prefix
    tails = key_lengths - old_prefix + 4 + value_lengths  # after the prefix: key rest, value length, value
    kg_new = group // state_count
    heads = np.empty((len(group), head), np.uint8)
    new_lengths = key_lengths + new_prefix - old_prefix
    for i in range(4):
        heads[:, i] = (new_lengths >> (8 * (3 - i))) & 0xFF
    if new_prefix == 2:
        heads[:, 4] = kg_new >> 8
        heads[:, 5] = kg_new & 0xFF
    else:
        heads[:, 4] = kg_new
    source = np.concatenate((b, heads.ravel()))
    lengths = np.empty(2 * len(group), np.int64)
    lengths[0::2], lengths[1::2] = head, tails
    origins = np.empty(2 * len(group), np.int64)
    origins[0::2] = len(b) + head * np.arange(len(group), dtype=np.int64)
    origins[1::2] = starts + 4 + old_prefix
    placed = np.cumsum(lengths) - lengths
    blob = source[np.repeat(origins - placed, lengths) + _steps(int(lengths.sum()))].tobytes()
    sizes = head + tails
    out_starts = placed[0::2]
    group = (kg_new << 16) | states[order]
    bounds = np.flatnonzero(np.diff(group)) + 1
    run_starts = np.concatenate(([0], bounds))
    run_ends = np.concatenate((bounds, [len(group)]))
    for first, end in zip(run_starts.tolist(), run_ends.tolist()):
        start_byte = int(out_starts[first])
        end_byte = int(out_starts[end - 1] + sizes[end - 1])
        regrouper.add_run(int(group[first]), blob[start_byte:end_byte], int(out_starts[end - 1]) - start_byte,
                          end - first)
    return True
