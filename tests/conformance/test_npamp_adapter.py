"""The conformance adapter, driven through its real stdio contract in a subprocess."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from iobridge.conformance import npamp_adapter as adapter
from iobridge.conformance.npamp_bridge_ops import BRIDGE_OPS
from iobridge.npamp.errors import AeadFailure
from iobridge.npamp.record.cipher import SUITE_AES_256_GCM, RecordCipher, seal_frame
from iobridge.npamp.wire.frame import HEADER_SIZE

VECTORS = Path(__file__).parents[1] / "npamp" / "vectors"
FLOW = json.loads((VECTORS / "handshake-flow-kat.json").read_text())
SEC = FLOW["expected"]["secrets"]
KS = json.loads((VECTORS / "key-schedule-kat.json").read_text())
PING = "4e50414d2000010000" + "00" * 8 + "00000000" + "0d880c25" + "00" * 11


class AdapterProcess:
    """``python -m iobridge.conformance.npamp_adapter`` on real pipes, one request at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "iobridge.conformance.npamp_adapter"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def send_raw(self, body: bytes) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(struct.pack("<I", len(body)) + body)
        self.proc.stdin.flush()
        (n,) = struct.unpack("<I", self.proc.stdout.read(4))
        reply: dict[str, Any] = json.loads(self.proc.stdout.read(n))
        return reply

    def call(self, op: str, **inp: Any) -> dict[str, Any]:
        return self.send_raw(json.dumps({"op": op, "in": inp}).encode())

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def proc() -> Iterator[AdapterProcess]:
    p = AdapterProcess()
    yield p
    assert p.close() == 0


def out(reply: dict[str, Any]) -> dict[str, Any]:
    assert set(reply) == {"out"}, reply
    result: dict[str, Any] = reply["out"]
    return result


def test_header_encode_and_decode_golden_ping(proc: AdapterProcess) -> None:
    enc = out(
        proc.call("header.encode", ver=2, flags=0, frameType=1, channel=0, seq=0, payloadLength=0)
    )
    assert enc["frame"] == PING
    dec = out(proc.call("header.decode", frame=PING))
    assert dec == {
        "magic": "NPAM",
        "ver": 2,
        "flags": 0,
        "frameType": 1,
        "channel": 0,
        "seq": 0,
        "payloadLength": 0,
        "crc32c": "0d880c25",
        "reservedZero": True,
    }


@pytest.mark.parametrize(
    "frame",
    [
        PING[:42] + "00000000" + PING[50:],  # CRC zeroed
        PING[:-2] + "01",  # reserved octet non-zero
        PING[: 72 - 2],  # truncated
        PING + "00",  # payload length mismatch
    ],
)
def test_header_decode_rejects(proc: AdapterProcess, frame: str) -> None:
    assert "error" in proc.call("header.decode", frame=frame)


def test_crc32c(proc: AdapterProcess) -> None:
    assert out(proc.call("crc32c", octets=PING[:42])) == {"crc32c": "0d880c25"}
    assert "error" in proc.call("crc32c", octets=PING[:40])


def test_tlv_ops(proc: AdapterProcess) -> None:
    assert out(proc.call("tlv.encode", type=0x8001, value="ab")) == {"tlv": "80010001ab"}
    assert out(proc.call("tlv.decode", tlv="000100020102")) == {
        "type": 1,
        "length": 2,
        "value": "0102",
    }
    assert "error" in proc.call("tlv.decode", tlv="80010001ab")  # unknown critical
    assert "error" in proc.call("tlv.decode", tlv="0001000301")  # truncated
    assert "error" in proc.call("tlv.decode", tlv="000100010102")  # trailing octets


def test_aead_seal_open_reproduce_the_server_auth_frame(proc: AdapterProcess) -> None:
    frame = bytes.fromhex(FLOW["expected"]["frames"]["server_auth"])
    args = {
        "suite": "AES-256-GCM",
        "key": SEC["s_hs_key"],
        "nonce": SEC["s_hs_iv"],
        "aad": frame[:21].hex(),
    }
    pt = FLOW["expected"]["auth_plaintext"]["server_auth"]
    assert out(proc.call("aead.seal", pt=pt, **args)) == {"sealed": frame[36:].hex()}
    assert out(proc.call("aead.open", sealed=frame[36:].hex(), **args)) == {"pt": pt}
    tampered = frame[36:-1] + bytes([frame[-1] ^ 1])
    assert "error" in proc.call("aead.open", sealed=tampered.hex(), **args)
    assert "skipped" in proc.call("aead.seal", **{**args, "suite": "AES-128-GCM"}, pt="")
    assert "error" in proc.call("aead.seal", **{**args, "key": "00"}, pt="")


def test_frame_seal_open_use_the_corpus_plaintext_length_aad(proc: AdapterProcess) -> None:
    key, iv, pt = bytes(range(32)), bytes(range(12)), b"hello n-pamp"
    fields = {
        "suite": "AES-256-GCM",
        "ver": 2,
        "flags": 2,
        "frameType": 0x0104,
        "channel": 0x000D,
        "seq": "5",
        "key": key.hex(),
        "iv": iv.hex(),
    }
    sealed = out(proc.call("frame.seal", pt=pt.hex(), **fields))["sealed"]
    prefix = b"NPAM" + bytes([0x22]) + struct.pack(">HHQI", 0x0104, 0x000D, 5, len(pt))
    nonce = (int.from_bytes(iv, "big") ^ 5).to_bytes(12, "big")
    assert sealed == AESGCM(key).encrypt(nonce, pt, prefix).hex()
    assert out(proc.call("frame.open", sealed=sealed, **fields)) == {"pt": pt.hex()}
    assert "error" in proc.call("frame.open", sealed=sealed, **{**fields, "channel": 0x000C})
    assert "error" in proc.call("frame.open", sealed="00" * 15, **fields)


def test_hkdf_ops(proc: AdapterProcess) -> None:
    tc = KS["rfc5869_tc1"]
    assert out(
        proc.call("hkdf.expand", hash="sha256", prk=tc["prk"], info=tc["info"], length=tc["L"])
    ) == {"okm": tc["okm"]}
    assert "error" in proc.call(
        "hkdf.expand", hash="sha256", prk=tc["prk"], info="", length=255 * 32 + 1
    )
    assert "skipped" in proc.call("hkdf.expand", hash="md5", prk="00", info="", length=1)
    th_kem = FLOW["expected"]["transcript"]["th_kem"]
    assert out(
        proc.call(
            "hkdf.expand_label",
            hash="sha256",
            secret=SEC["handshake_secret"],
            label="c hs",
            context=th_kem,
            length=32,
        )
    ) == {"out": SEC["c_hs_secret"]}


def test_keys_derive_traffic_and_nonce(proc: AdapterProcess) -> None:
    for direction, side in ((0, "c2s"), (1, "s2c")):
        got = out(
            proc.call(
                "keys.derive_traffic",
                profile="Standard",
                master=SEC["master_secret"],
                dir=direction,
                epoch="0",
                suite=1,
                channel=0,
            )
        )
        assert got == {"key": SEC[f"app_{side}_key"], "iv": SEC[f"app_{side}_iv"]}
    high = out(
        proc.call(
            "keys.derive_traffic",
            profile="High",
            master="11" * 48,
            dir=0,
            epoch=0,
            suite=1,
            channel=0,
        )
    )
    assert (len(high["key"]), len(high["iv"])) == (64, 24)
    iv = "000102030405060708090a0b"
    assert out(proc.call("nonce.derive", iv=iv, seq="18446744073709551615")) == {
        "nonce": "00010203fbfaf9f8f7f6f5f4",
    }
    assert "error" in proc.call("nonce.derive", iv="00", seq="1")


@pytest.mark.parametrize(
    ("profile", "kem", "accepted"),
    [
        ("Standard", "X25519MLKEM768", True),
        ("High", "X25519MLKEM1024", True),
        ("Sovereign", "X25519MLKEM1024", True),
        ("Sovereign", "X25519MLKEM768", False),
        ("High", "X25519MLKEM768", False),
    ],
)
def test_profile_check(proc: AdapterProcess, profile: str, kem: str, accepted: bool) -> None:
    reply = proc.call("profile.check", profile=profile, kem=kem)
    assert ("out" in reply) is accepted and ("error" in reply) is not accepted


def test_native_bodies_and_unknown_ops_skipped_bad_json_rejected(proc: AdapterProcess) -> None:
    assert "skipped" in proc.call("memory.body.decode", frameType=1, body="a0")
    assert "skipped" in proc.call("no.such.op")
    assert "error" in proc.send_raw(b"{not json")
    assert "error" in proc.send_raw(b'["op"]')
    assert "error" in proc.call("tlv.encode", type="x", value="")
    # The process survived all of the above.
    assert out(proc.call("crc32c", octets=PING[:42]))["crc32c"] == "0d880c25"


def test_bridge_ops_are_merged(proc: AdapterProcess) -> None:
    assert set(BRIDGE_OPS) == {op for op in adapter.OPS if op.startswith("bridge.")}
    assert "bridge.envelope.decode" in BRIDGE_OPS
    payload = "0010000835040100027231000200"  # BRIDGE_ERROR, ProtocolUnsupported (digest §7)
    got = out(proc.call("bridge.envelope.decode", frameType=0x0102, payload=payload))
    assert (got["protocol_id"], got["message_kind"], got["corr"]) == (0x35, 4, "7231")
    assert got["safety"] is None and got["foreign"] == "0200"


def test_every_implemented_core_op_was_exercised() -> None:
    core = {op for op in adapter.OPS if not op.startswith("bridge.")}
    tested = {
        "header.encode",
        "header.decode",
        "crc32c",
        "tlv.decode",
        "tlv.encode",
        "aead.seal",
        "aead.open",
        "hkdf.expand",
        "hkdf.expand_label",
        "keys.derive_traffic",
        "nonce.derive",
        "frame.seal",
        "frame.open",
        "profile.check",
    }
    assert core == tested


def test_truncated_stream_ends_cleanly() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "iobridge.conformance.npamp_adapter"],
        input=struct.pack("<I", 100) + b"{",
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert (p.returncode, p.stdout) == (0, b"")


def test_plaintext_length_aad_variant_is_distinct_and_roundtrips() -> None:
    cipher = RecordCipher(SUITE_AES_256_GCM, bytes(range(32)), bytes(12))
    fields = {"frame_type": 0x0100, "channel": 0x000D, "seq": 3, "flags": 0x02}
    sealed = adapter.seal_plaintext_length_aad(cipher, plaintext=b"hello", **fields)
    wire = seal_frame(cipher, frame_type=0x0100, channel=0x000D, seq=3, plaintext=b"hello")
    assert sealed != wire[HEADER_SIZE:]
    assert adapter.open_plaintext_length_aad(cipher, sealed=sealed, **fields) == b"hello"
    with pytest.raises(AeadFailure):
        adapter.open_plaintext_length_aad(cipher, sealed=wire[HEADER_SIZE:], **fields)
    with pytest.raises(AeadFailure):
        adapter.open_plaintext_length_aad(cipher, sealed=b"short", **fields)
