"""Index splits of the replayable sources (CollectionSource, NumberSequenceSource)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from statekit.runtime.connectors.sources import index_split


@given(first=st.integers(-50, 50), count=st.integers(0, 200), parallelism=st.integers(1, 9))
def test_the_splits_cover_every_index_once_in_order_and_differ_by_at_most_one(first: int, count: int,
                                                                              parallelism: int) -> None:
    splits = [index_split(first, first + count - 1, parallelism, subtask) for subtask in range(parallelism)]
    covered = [i for start, end in splits for i in range(start, end + 1)]
    assert covered == list(range(first, first + count))
    sizes = [end - start + 1 for start, end in splits]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
