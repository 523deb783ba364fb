"""The wire format of network buffers: pickle protocol 5 against msgpack and Arrow IPC.

A network buffer between TaskManagers is a list of records (a keyed exchange's buffer, about
``--buffer-size`` bytes). For each kind of record below, the same buffers are encoded and decoded
by each candidate in one process, in turn, ``--repeat`` times; the best round counts. Printed per
record: encode ns, decode ns, bytes on the wire, the time against pickle's (the format the runtime
sends, so the baseline of the same run), and whether a decoded buffer equals the original
(``==`` and the same types all the way down: a tuple that comes back as a list is a different
record to a user's function).

Record kinds: short strings (``key-N``, what ``bench/runtime_bench.py`` sends), ``(str, int)``
tuples (a keyed count's output), ``(value, timestamp)`` pairs of event time, dicts of four fields
(a JSON-ish event), and floats.

Candidates:
  * pickle: ``pickle.dumps(buffer, protocol=5)`` / ``pickle.loads``;
  * msgpack: a reused ``Packer(use_bin_type=True)`` / ``unpackb(raw=False, strict_map_key=False)``;
  * msgpack+tuples: the same with ``use_list=False`` (arrays come back as tuples — and so does the
    buffer itself, and a list inside a record);
  * arrow: ``pa.array(buffer)`` (type inferred) written as one Arrow IPC stream batch, read back
    and turned into Python objects (``to_pylist``) — what a columnar wire format costs a runtime
    whose operators take Python objects. Tuples have no inferred Arrow type: those kinds print
    ``n/a``.

Usage: python bench/serialization_bench.py [--buffer-bytes 32768] [--buffers 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import pickle
import time
from collections.abc import Callable
from typing import Any

import msgpack
import pyarrow as pa

Codec = tuple[Callable[[list[Any]], bytes], Callable[[bytes], Any]]


def record_kinds() -> dict[str, Callable[[int], Any]]:
    return {
        "short str": lambda i: f"key-{(i * 7919) % 100_000}",
        "(str, int)": lambda i: (f"key-{(i * 7919) % 100_000}", i),
        "(value, ts)": lambda i: (i * 3, 1_700_000_000_000 + i),
        "dict of 4": lambda i: {"user": f"u{i % 5000}", "page": f"/p/{i % 300}", "ms": 1_700_000_000_000 + i,
                                "ok": i % 7 != 0},
        "float": lambda i: i * 0.5,
    }


def codecs() -> dict[str, Codec]:
    packer = msgpack.Packer(use_bin_type=True, autoreset=True)

    def arrow_encode(buffer: list[Any]) -> bytes:
        batch = pa.record_batch([pa.array(buffer)], names=["r"])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]

    def arrow_decode(data: bytes) -> list[Any]:
        table = pa.ipc.open_stream(data).read_all()
        return table.column(0).to_pylist()  # type: ignore[no-any-return]

    return {
        "pickle": (lambda b: pickle.dumps(b, protocol=5), pickle.loads),
        "msgpack": (packer.pack, lambda d: msgpack.unpackb(d, raw=False, strict_map_key=False)),
        "msgpack+tuples": (packer.pack, lambda d: msgpack.unpackb(d, raw=False, strict_map_key=False,
                                                                   use_list=False)),
        "arrow": (arrow_encode, arrow_decode),
    }


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    return bool(a == b)


def buffers_of(make: Callable[[int], Any], buffer_bytes: int, count: int) -> list[list[Any]]:
    """``count`` buffers of about ``buffer_bytes`` pickled bytes each."""
    per = max(1, buffer_bytes // max(1, len(pickle.dumps([make(i) for i in range(100)], protocol=5)) // 100))
    return [[make(b * per + i) for i in range(per)] for b in range(count)]


def measure(codec: Codec, buffers: list[list[Any]], repeat: int) -> tuple[float, float, float, bool] | None:
    """(encode ns, decode ns, bytes) per record, best of ``repeat``, and whether it round-trips;
    None when the codec cannot encode these records."""
    encode, decode = codec
    records = sum(len(b) for b in buffers)
    try:
        encoded = [encode(b) for b in buffers]
        decoded = [decode(d) for d in encoded]
    except (TypeError, ValueError, pa.ArrowException):
        return None
    exact = all(same(a, b) for a, b in zip(buffers, decoded, strict=True))
    best_enc = best_dec = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for b in buffers:
            encode(b)
        best_enc = min(best_enc, time.perf_counter() - start)
        start = time.perf_counter()
        for d in encoded:
            decode(d)
        best_dec = min(best_dec, time.perf_counter() - start)
    size = sum(len(d) for d in encoded)
    return best_enc / records * 1e9, best_dec / records * 1e9, size / records, exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--buffer-bytes", type=int, default=32 * 1024)
    parser.add_argument("--buffers", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"network buffers of about {args.buffer_bytes:,} bytes, {args.buffers} per kind, best of {args.repeat}")
    print(f"  {'records':<13}{'codec':<16}{'enc ns':>8}{'dec ns':>8}{'bytes':>7}{'x pickle':>10}  round trip")
    for kind, make in record_kinds().items():
        buffers = buffers_of(make, args.buffer_bytes, args.buffers)
        base: float | None = None
        for name, codec in codecs().items():
            result = measure(codec, buffers, args.repeat)
            if result is None:
                print(f"  {kind:<13}{name:<16}{'n/a':>8}")
                continue
            enc, dec, size, exact = result
            if base is None:
                base = enc + dec
            print(f"  {kind:<13}{name:<16}{enc:>8.1f}{dec:>8.1f}{size:>7.1f}{(enc + dec) / base:>9.2f}x  "
                  f"{'exact' if exact else 'CHANGED'}")


if __name__ == "__main__":
    main()
