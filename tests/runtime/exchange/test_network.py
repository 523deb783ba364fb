"""The framed connection between TaskManagers: every frame comes out whole and in order, whatever
the sizes of the frames and of the socket reads (a frame straddles reads, many frames share one)."""

from __future__ import annotations

import socket
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.runtime.exchange import network
from statekit.runtime.exchange.network import Connection

FRAMES = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 2**32 - 1), st.binary(max_size=300)),
                  min_size=1, max_size=60)


def exchange(frames: list[tuple[int, int, bytes]], senders: int = 1) -> list[tuple[int, int, bytes]]:
    """Send ``frames`` over a socket pair (split among ``senders`` threads) and read them back;
    once the senders are done the sending end closes, so a reader that lost the framing fails
    at once (the peer closed) instead of waiting for a frame that never comes."""
    left, right = socket.socketpair()
    sending, receiving = Connection(left), Connection(right)
    received: list[tuple[int, int, bytes]] = []
    failures: list[BaseException] = []

    def send(share: list[tuple[int, int, bytes]]) -> None:
        try:
            for kind, channel, payload in share:
                sending.send(kind, channel, payload)
        except network.ConnectionClosed:
            pass  # the reader gave up: its failure is the one reported

    def receive() -> None:
        try:
            for _ in frames:
                received.append(receiving.receive())
        except network.ConnectionClosed as error:
            failures.append(error)

    threads = [threading.Thread(target=send, args=(frames[i::senders],), daemon=True) for i in range(senders)]
    reader = threading.Thread(target=receive, daemon=True)
    for thread in [*threads, reader]:
        thread.start()
    for thread in threads:
        thread.join(10)
    left.shutdown(socket.SHUT_RDWR)
    reader.join(10)
    left.close()
    right.close()
    assert not failures and not reader.is_alive(), \
        f"{len(received)} of {len(frames)} frames came out whole; the stream lost its framing: {failures}"
    return received


@settings(max_examples=200, deadline=None)
@given(frames=FRAMES, block=st.integers(1, 64))
def test_frames_come_out_whole_and_in_order_whatever_the_read_size(
    frames: list[tuple[int, int, bytes]], block: int
) -> None:
    saved = network._READ_BLOCK
    network._READ_BLOCK = block  # small reads: frames straddle them, and one read holds several
    try:
        assert exchange(frames) == frames
    finally:
        network._READ_BLOCK = saved


def test_frames_of_concurrent_senders_are_never_interleaved() -> None:
    frames = [(2, i % 7, bytes([i % 251]) * (i * 37 % 90_000)) for i in range(400)]  # some above the copy size
    received = exchange(frames, senders=4)
    assert sorted(received) == sorted(frames)
    for _kind, _channel, payload in received:
        assert payload == bytes(payload[:1]) * len(payload)
