"""The network stack between processes: channels to consumer subtasks another process runs.

Every host (a TaskManager process) runs one :class:`NetworkEndpoint`: a Unix-domain socket in the
job's private run directory that the other hosts connect to. A host that has channels into
another host's subtasks opens one :class:`OutboundLink` to that host's endpoint (one connection
per pair of hosts, shared by all the channels between them). A channel to a remote consumer is a
:class:`RemoteGate` standing in for the consumer's :class:`~statekit.runtime.exchange.input_gate.InputGate`
in a record writer's :class:`~statekit.runtime.exchange.record_writer.ChannelTarget`: the writer
cannot tell the difference.

Frames (both directions, one connection): ``length u32 | kind u8 | channel u32 | payload``, big-endian;
``channel`` is a number the sending link gave the channel when it registered it. A link sends
``REGISTER`` (the consumer's vertex, subtask and gate channel) before a channel's first item,
then ``DATA`` (a pickled record list, protocol 5), ``TIMESTAMPED`` (a pickled pair of value and
timestamp lists), ``EVENT`` (a pickled in-band event: barrier, watermark, end of input...) and
``PRIORITY`` (a pickled priority barrier); the endpoint answers with ``CREDIT`` frames.

Credit-based flow control (Flink's): a sender may have at most :data:`INITIAL_CREDITS` data-lane
items of a channel that its consumer has not taken yet; each item it sends spends one credit, and
the consumer's gate grants one back (a ``CREDIT`` frame) when the consumer task takes an item of
that channel. A producer without credit keeps its buffer in its writer's backlog — exactly as when
a local consumer's gate is full — so backpressure crosses processes and the memory a channel holds
stays bounded by its credits. Priority barriers travel without credit (they overtake). Frames of
one channel arrive in the order they were sent, so the counting invariant of unaligned checkpoints
holds across processes: the items a priority barrier overtook are in the consumer's gate (or on
their way in this connection, ahead of it) when the barrier arrives.

Records are pickled (protocol 5): it keeps Python's types (tuples stay tuples, user classes
survive), and a buffer of short strings costs about 35 ns a record each way.
``bench/serialization_bench.py`` measures the others on the same buffers: msgpack takes 0.6–0.8×
pickle's time on short strings and 0.9–1.3× on tuples, floats and dicts, but turns tuples into lists
(or, with ``use_list=False``, every list into a tuple, the buffer included); Arrow IPC has no tuples
(of one type they come back as lists; of mixed types it infers no type) and takes 1.2–1.6×. The sockets live in a directory only the job's
user can enter; a connection proves it belongs to the job with the job's token before anything
else is read, so no other process can make a TaskManager unpickle.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import pickle
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from statekit.runtime.checkpoint.barriers import PriorityBarrier
from statekit.runtime.exchange.batch_path import TimestampedBuffer
from statekit.runtime.exchange.input_gate import InputGate, TaskCancelled
from statekit.runtime.exchange.record_writer import ChannelTarget

__all__ = [
    "INITIAL_CREDITS",
    "Connection",
    "ConnectionClosed",
    "OutboundLink",
    "RemoteGate",
    "NetworkEndpoint",
    "encode_payload",
    "decode_payload",
]

log = logging.getLogger("statekit.runtime")

INITIAL_CREDITS = 8
_HEADER = struct.Struct(">IBI")
_REGISTER = struct.Struct(">III")
_CREDIT = struct.Struct(">I")
_MAX_FRAME = 1 << 30
_READ_BLOCK = 1 << 16
_COPY_BELOW = 1 << 16  # smaller payloads go in one send with their header

REGISTER, DATA, TIMESTAMPED, EVENT, PRIORITY, CREDIT = 1, 2, 3, 4, 5, 6


class ConnectionClosed(Exception):
    """The peer closed the connection (or it broke)."""


class Connection:
    """Framed messages over one socket; any thread may send (one frame at a time)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        self._closed = False
        self._in = bytearray()  # read from the socket, not yet returned (from _at on)
        self._at = 0

    def send(self, kind: int, channel: int, payload: bytes = b"") -> None:
        """Send one frame.

        Raises:
            ConnectionClosed: The connection is closed or broke.
        """
        header = _HEADER.pack(len(payload), kind, channel)
        frame = header + payload if len(payload) < _COPY_BELOW else None
        with self._send_lock:
            if self._closed:
                raise ConnectionClosed("connection closed")
            try:
                if frame is not None:
                    self.sock.sendall(frame)
                else:
                    self.sock.sendall(header)
                    self.sock.sendall(payload)
            except OSError as exc:
                self._closed = True
                raise ConnectionClosed(str(exc)) from exc

    def receive(self) -> tuple[int, int, bytes]:
        """The next frame ``(kind, channel, payload)`` (frames are read from the socket in blocks:
        many small frames cost one system call).

        Raises:
            ConnectionClosed: The peer closed the connection, or it broke.
        """
        self._fill(_HEADER.size)
        length, kind, channel = _HEADER.unpack_from(self._in, self._at)
        if length > _MAX_FRAME:
            raise ConnectionClosed(f"a frame of {length} bytes is larger than any this runtime sends")
        self._fill(_HEADER.size + length)  # may move the unread bytes to the buffer's start
        start = self._at + _HEADER.size
        end = start + length
        with memoryview(self._in) as view:
            payload = bytes(view[start:end])
        self._at = end
        return kind, channel, payload

    def _fill(self, size: int) -> None:
        """At least ``size`` unread bytes in the input buffer."""
        while len(self._in) - self._at < size:
            if self._at:
                del self._in[:self._at]
                self._at = 0
            try:
                chunk = self.sock.recv(max(_READ_BLOCK, size - len(self._in)))
            except OSError as exc:
                raise ConnectionClosed(str(exc)) from exc
            if not chunk:
                raise ConnectionClosed("the peer closed the connection")
            self._in += chunk

    def close(self) -> None:
        with self._send_lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


def encode_payload(payload: Any) -> tuple[int, bytes]:
    """(frame kind, bytes) of a data-lane payload: a record list, a timestamped buffer, or an event."""
    if payload.__class__ is list:
        return DATA, pickle.dumps(payload, protocol=5)
    if payload.__class__ is TimestampedBuffer:
        return TIMESTAMPED, pickle.dumps((list(payload), payload.timestamps), protocol=5)
    return EVENT, pickle.dumps(payload, protocol=5)


def decode_payload(kind: int, data: bytes) -> Any:
    """The payload :func:`encode_payload` encoded."""
    if kind == DATA:
        return pickle.loads(data)
    if kind == TIMESTAMPED:
        values, timestamps = pickle.loads(data)
        buffer = TimestampedBuffer()
        buffer.extend(values)
        buffer.timestamps = timestamps
        return buffer
    return pickle.loads(data)


def authenticate(connection: Connection, token: bytes) -> None:
    """Send this job's token (the first frame of every connection)."""
    connection.send(0, 0, token)


def check_token(connection: Connection, token: bytes) -> bool:
    """Whether the connection's first frame is this job's token."""
    try:
        kind, _, payload = connection.receive()
    except ConnectionClosed:
        return False
    return kind == 0 and hmac.compare_digest(payload, token)


class OutboundLink:
    """This host's connection to another host's endpoint: the channels into that host's subtasks
    and their credits. A thread reads the credits the other host grants."""

    def __init__(self, path: str, token: bytes, name: str) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        self.connection = Connection(sock)
        authenticate(self.connection, token)
        self.name = name
        self._credits: dict[int, int] = {}
        self._credit_added = threading.Condition()
        self.cancelled = threading.Event()
        self._gates: dict[tuple[int, int], RemoteGate] = {}
        self._reader = threading.Thread(target=self._read_credits, name=f"credits from {name}", daemon=True)
        self._reader.start()

    def gate(self, vertex: int, subtask: int) -> RemoteGate:
        """The stand-in for the gate of subtask ``subtask`` of vertex ``vertex`` on the other host."""
        key = (vertex, subtask)
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = RemoteGate(self, vertex, subtask)
        return gate

    def register(self, vertex: int, subtask: int, gate_channel: int) -> int:
        """A new channel into channel ``gate_channel`` of that gate: its number on this link."""
        with self._credit_added:
            channel = len(self._credits)
            self._credits[channel] = INITIAL_CREDITS
        self.connection.send(REGISTER, channel, _REGISTER.pack(vertex, subtask, gate_channel))
        return channel

    def try_spend(self, channel: int) -> bool:
        """Spend one credit of ``channel`` if it has one."""
        with self._credit_added:
            if self._credits[channel] <= 0:
                return False
            self._credits[channel] -= 1
            return True

    def wait_for_credit(self, timeout: float) -> None:
        with self._credit_added:
            self._credit_added.wait(timeout)

    def credits(self, channel: int) -> int:
        with self._credit_added:
            return self._credits[channel]

    def _read_credits(self) -> None:
        try:
            while True:
                kind, channel, payload = self.connection.receive()
                if kind != CREDIT:
                    raise ConnectionClosed(f"unexpected frame kind {kind} on a sending link")
                (count,) = _CREDIT.unpack(payload)
                with self._credit_added:
                    self._credits[channel] += count
                    self._credit_added.notify_all()
        except ConnectionClosed:
            pass
        finally:
            self.cancelled.set()
            with self._credit_added:
                self._credit_added.notify_all()

    def close(self) -> None:
        self.cancelled.set()
        self.connection.close()


class RemoteGate:
    """A consumer subtask's gate as seen from another process: the producer's side of its remote
    channels (what a :class:`ChannelTarget` needs of a gate: ``offer``, ``put_priority``,
    ``wait_for_room``, ``cancelled``)."""

    def __init__(self, link: OutboundLink, vertex: int, subtask: int) -> None:
        self.link = link
        self.vertex = vertex
        self.subtask = subtask
        self.cancelled = link.cancelled
        self._channels: dict[int, int] = {}  # gate channel -> link channel
        # bytes a record of this gate's buffers took on the wire lately (a moving average), which
        # record writers size their buffers by; None until a record buffer went
        self.record_bytes: float | None = None

    def target(self, gate_channel: int) -> ChannelTarget:
        """The output channel into ``gate_channel`` of this gate (registered on the link now)."""
        if gate_channel not in self._channels:
            self._channels[gate_channel] = self.link.register(self.vertex, self.subtask, gate_channel)
        return ChannelTarget(self, gate_channel)  # type: ignore[arg-type]

    def offer(self, item: tuple[int, Any]) -> bool:
        """Send a data-lane item if its channel has credit; never blocks."""
        gate_channel, payload = item
        channel = self._channels[gate_channel]
        if not self.link.try_spend(channel):
            return False
        kind, data = encode_payload(payload)
        try:
            self.link.connection.send(kind, channel, data)
        except ConnectionClosed as exc:
            raise TaskCancelled() from exc
        if kind != EVENT and payload:
            measured = len(data) / len(payload)
            previous = self.record_bytes
            self.record_bytes = measured if previous is None else previous + (measured - previous) / 4
        return True

    def put_priority(self, item: tuple[int, Any]) -> None:
        """Send a priority barrier ahead of everything not sent yet (no credit needed)."""
        gate_channel, barrier = item
        assert isinstance(barrier, PriorityBarrier)
        try:
            self.link.connection.send(PRIORITY, self._channels[gate_channel], pickle.dumps(barrier, protocol=5))
        except ConnectionClosed as exc:
            raise TaskCancelled() from exc

    def wait_for_room(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a credit (of any channel of the link)."""
        self.link.wait_for_credit(timeout)


class NetworkEndpoint:
    """This host's endpoint: other hosts' links deliver into the gates of the subtasks it runs.

    It listens from the start (so other hosts can connect while this one deploys); a link's
    frames are read once :meth:`serve` gave it the gates.

    Args:
        path: The Unix-domain socket to listen on.
        token: The job's token; a connection that does not present it first is dropped.
        on_failure: Called with a description when an established link breaks (another host died).
    """

    def __init__(self, path: str, token: bytes, on_failure: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._token = token
        self.gates: dict[tuple[int, int], InputGate] = {}
        self._ready = threading.Event()
        self._on_failure = on_failure
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(64)
        self._connections: list[Connection] = []
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, name="network endpoint", daemon=True)
        self._acceptor.start()

    def serve(self, gates: dict[tuple[int, int], InputGate]) -> None:
        """The input gates of this host's subtasks, by (vertex id, subtask): links deliver into them."""
        self.gates = dict(gates)
        self._ready.set()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            connection = Connection(sock)
            with self._lock:
                self._connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), name="network link", daemon=True).start()

    def _serve(self, connection: Connection) -> None:
        if not check_token(connection, self._token):
            connection.close()
            return
        channels: dict[int, tuple[InputGate, int]] = {}
        while not self._ready.wait(0.1):
            if self._closed.is_set():
                connection.close()
                return
        try:
            while True:
                kind, channel, payload = connection.receive()
                if kind == REGISTER:
                    vertex, subtask, gate_channel = _REGISTER.unpack(payload)
                    gate = self.gates[(vertex, subtask)]
                    channels[channel] = (gate, gate_channel)
                    gate.set_remote(gate_channel, _credit_sender(connection, channel))
                elif kind == PRIORITY:
                    gate, gate_channel = channels[channel]
                    gate.put_priority((gate_channel, pickle.loads(payload)))
                else:
                    gate, gate_channel = channels[channel]
                    gate.put_remote((gate_channel, decode_payload(kind, payload)))
        except ConnectionClosed as exc:
            if not self._closed.is_set() and self._on_failure is not None and channels:
                self._on_failure(f"a link from another TaskManager broke: {exc}")
        finally:
            connection.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.close()


def _credit_sender(connection: Connection, channel: int) -> Callable[[], None]:
    one = _CREDIT.pack(1)

    def grant() -> None:
        with contextlib.suppress(ConnectionClosed):
            connection.send(CREDIT, channel, one)

    return grant
