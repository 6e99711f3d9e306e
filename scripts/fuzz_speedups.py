"""Fuzz the compiled N-PAMP per-event path against its pure-Python twins (``make fuzz``).

``make fuzz`` builds ``iobridge.npamp._speedups`` with AddressSanitizer and UBSan and runs
this under them (``PYTHONMALLOC=malloc``, so every Python object is ASan's to check). For
``--seconds`` it mutates valid inputs (bit flips, truncations, insertions, spliced lengths
and event ids) and feeds each to both implementations:

* header and frame decode (``pull_header``, ``pull_frame``) against
  ``pull_frame_header_reference`` / ``pull_frame_reference``: the same header or frame, or
  ``None`` exactly where the reference raises, at any offset and payload cap;
* the consumer's data-frame runs (``stream_data``) through a compiled and a reference
  ``BridgeSession``: the same events, rejections, replies and stream states;
* the producer's (``stream_frames``) through ``send_events``: the same frames, or the same
  error;
* the positional ``Maker`` against ``reference_maker``: equal objects or the same error;
* every entry point with arguments of the wrong type or range: an exception, never a crash.

A mismatch raises (exit 1); a sanitizer finding aborts the process. Not part of ``make
test``: it runs for as long as it is given.

    python scripts/fuzz_speedups.py PATH/_speedups.so [--seconds 60] [--seed N]
"""

from __future__ import annotations

import argparse
import gc
import importlib.machinery
import importlib.util
import random
import sys
import time
from typing import Any


def _load(path: str) -> Any:
    """Import ``path`` as ``iobridge.npamp._speedups`` before anything else imports it."""
    loader = importlib.machinery.ExtensionFileLoader("iobridge.npamp._speedups", path)
    spec = importlib.util.spec_from_file_location("iobridge.npamp._speedups", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["iobridge.npamp._speedups"] = module
    loader.exec_module(module)
    return module


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.45 and out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif choice < 0.6 and out:
            del out[rng.randrange(len(out)) :]
        elif choice < 0.75:
            at = rng.randrange(len(out) + 1)
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif choice < 0.9 and len(out) >= 4:
            at = rng.randrange(len(out) - 3)
            out[at : at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00",
                                           b"\x00\x00\x00\x0b", b"\x7f\xff\xff\xff"])
        elif out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extension", help="the sanitized _speedups shared object")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    speedups = _load(args.extension)

    from iobridge.npamp import _makers
    from iobridge.npamp.bridge import AGUI_PROTOCOL_ID, BridgeSession
    from iobridge.npamp.bridge import envelope as b
    from iobridge.npamp.bridge.events import BridgeFrameRejected, StreamDataReceived
    from iobridge.npamp.bridge.state import Role
    from iobridge.npamp.errors import NpampError
    from iobridge.npamp.record.cipher import RecordCipher, SendState
    from iobridge.npamp.wire.frame import (
        Frame,
        FrameDecodeError,
        FrameHeader,
        pull_frame_header_reference,
        pull_frame_reference,
    )
    from iobridge.npamp_server.client import AgUiEvent

    assert sys.modules["iobridge.npamp._speedups"] is speedups
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    print(f"fuzz_speedups: seed {seed}, {args.seconds:g} s, {args.extension}", flush=True)
    sender = SendState(0x000D, RecordCipher(1, bytes(32), bytes(12)))
    frame_seeds = [sender.seal(0x0104, rng.randbytes(n)) for n in (0, 1, 40, 300)]

    def data_frame(corr: bytes, event_id: int, body: bytes) -> bytes:
        return b.push_bridge_message(b.BridgeMessage(
            frame_type=b.BridgeFrameType.BRIDGE_STREAM_DATA,
            envelope=b.BridgeEnvelope(protocol_id=AGUI_PROTOCOL_ID, message_kind=5,
                                      content_type=1, correlation_id=corr),
            stream_control=b.StreamControl(event_id=event_id, resumable=True), body=body))

    def consumer(compiled: bool) -> BridgeSession:
        session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, compiled=compiled)
        for corr in (b"c1", b"c2"):
            session.start_run(corr, b"{}")
        session.data_to_send()
        return session

    def observed(session: BridgeSession, events: list[Any]) -> Any:
        shown = [(type(e.error), str(e.error)) if isinstance(e, BridgeFrameRejected) else e
                 for e in events]
        states = [session.state_of(Role.CONSUMER, c) for c in (b"c1", b"c2")]
        return shown, session.data_to_send(), states

    def decode(fn: Any, *a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except FrameDecodeError as exc:
            return type(exc)

    def header_case() -> None:
        wire = _mutate(rng, rng.choice(frame_seeds))
        cap = rng.choice([0, 16, 60, 1 << 24, 2**64 - 1])
        offset = rng.choice([0, 0, 1, len(wire) - 36, len(wire), -1, 2**40])
        got = speedups.pull_header(FrameHeader, wire, offset, cap)
        ref = (decode(pull_frame_header_reference, wire, offset, max_payload_length=cap)
               if 0 <= offset <= len(wire) else FrameDecodeError)
        assert got == (None if isinstance(ref, type) else ref), (wire.hex(), offset, cap)
        got_frame = speedups.pull_frame(Frame, FrameHeader, wire, cap)
        ref_frame = decode(pull_frame_reference, wire, max_payload_length=cap)
        assert got_frame == (None if isinstance(ref_frame, type) else ref_frame), wire.hex()

    def consumer_case() -> None:
        frames: list[tuple[int, bytes]] = []
        last = {b"c1": 0, b"c2": 0}
        for n in range(rng.randint(1, 12)):
            corr = rng.choice([b"c1", b"c2"])
            last[corr] = max(0, last[corr] + rng.choice([1, 1, 1, 0, -1, 2**40]))
            payload = data_frame(corr, min(last[corr], 2**64 - 1), b'{"n":%d}' % n)
            if rng.random() < 0.3:
                payload = _mutate(rng, payload)
            frame_type = int(b.BridgeFrameType.BRIDGE_STREAM_DATA)
            if rng.random() < 0.05:
                frame_type = rng.choice([0x0105, 0x0100, 0x10104])
            frames.append((frame_type, payload))
        fast, slow = consumer(True), consumer(False)
        assert observed(fast, fast.receive_frames(frames)) == observed(
            slow, slow.receive_frames(frames)), frames

    def producer_case() -> None:
        datas: list[Any] = [rng.randbytes(rng.randint(0, 20)) for _ in range(rng.randint(1, 9))]
        if rng.random() < 0.2:
            datas.insert(rng.randrange(len(datas) + 1), rng.choice(["text", 7, bytearray(b"x")]))
        cursor = rng.choice([None, 0, 2**64 - rng.randint(1, 12)])
        resumable = rng.random() < 0.5
        results = []
        for compiled in (True, False):
            session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, resumable=resumable,
                                    compiled=compiled)
            peer = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
            if cursor is None:
                peer.start_run(b"c1", b"{}")
            else:
                peer.resume_run(b"c1", cursor=cursor)
            session.receive_frames(peer.data_to_send())
            try:
                outcome: Any = session.send_events(b"c1", list(datas))
            except (NpampError, TypeError) as exc:
                outcome = (type(exc), str(exc))
            results.append((outcome, session.data_to_send()))
        assert results[0] == results[1], datas

    def maker_case() -> None:
        cls = rng.choice([StreamDataReceived, AgUiEvent])
        count = rng.choice([3, 4, 4, 5, 0])
        atoms_or_not = [b"c", 1, {"a": [1]}, {"a": 1}, (1, "t"), None, "s", 2**80]
        values = [rng.choice(atoms_or_not) for _ in range(count)]
        outcomes = []
        for make in (_makers.positional_maker(cls), _makers.reference_maker(cls)):
            try:
                outcomes.append(make(*values))
            except TypeError:
                outcomes.append(TypeError)
        if outcomes[1] is not TypeError:  # the reference builds it: the compiled maker too
            assert outcomes[0] == outcomes[1], values
            # Left to reference counting only when no value could ever join a cycle.
            may_cycle = any(gc.is_tracked(v) or isinstance(v, dict | list) for v in values)
            assert gc.is_tracked(outcomes[0]) == may_cycle, values

    junk = [None, 0, -1, 2**64, 2**200, "x", b"", bytearray(36), memoryview(b"x" * 40),
            [], [(1, b"")], [(0x0104, b"x" * 50)], (), {}, frozenset(), 1.5, object(), FrameHeader]

    def junk_case() -> None:
        fn, arity = rng.choice([(speedups.pull_header, 4), (speedups.pull_frame, 4),
                                (speedups.stream_data, 7), (speedups.stream_frames, 6),
                                (speedups.Maker, 2)])
        call = [rng.choice(junk) for _ in range(arity + rng.choice([0, 0, 0, -1, 1]))]
        try:
            made = fn(*call)
            if fn is speedups.Maker:
                made(*[rng.choice(junk) for _ in range(rng.randint(0, 4))])
        except (TypeError, ValueError, OverflowError, AttributeError):
            pass

    cases = [header_case, header_case, consumer_case, producer_case, maker_case, junk_case]
    counts = dict.fromkeys((c.__name__ for c in cases), 0)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        case = rng.choice(cases)
        case()
        counts[case.__name__] += 1
    print("fuzz_speedups: no mismatch, no crash; cases run: "
          + ", ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
