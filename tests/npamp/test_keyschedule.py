"""Key schedule: RFC anchors, the N-PAMP ladder against an independent oracle, flow-KAT secrets."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp.record import keyschedule as ks

VECTORS = Path(__file__).parent / "vectors"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return data


KS = load("key-schedule-kat.json")
FLOW = load("handshake-flow-kat.json")


def h(x: str) -> bytes:
    return bytes.fromhex(x)


# --- an oracle written from RFC 5869 / RFC 8446 §7.1 text, sharing no code with the module ----


def oracle_expand(prk: bytes, info: bytes, length: int, name: str = "sha256") -> bytes:
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([i]), name).digest()
        out += block
        i += 1
    return out[:length]


def oracle_label(
    secret: bytes, prefix: bytes, label: bytes, ctx: bytes, n: int, name: str = "sha256"
) -> bytes:
    full = prefix + label
    info = n.to_bytes(2, "big") + bytes([len(full)]) + full + bytes([len(ctx)]) + ctx
    return oracle_expand(secret, info, n, name)


def test_rfc5869_tc1_extract_and_expand() -> None:
    tc = KS["rfc5869_tc1"]
    prk = ks.hkdf_extract(h(tc["salt"]), h(tc["ikm"]), "sha256")
    assert prk.hex() == tc["prk"]
    assert ks.hkdf_expand(prk, h(tc["info"]), tc["L"], "sha256").hex() == tc["okm"]


@pytest.mark.parametrize(
    ("label", "field", "length"),
    [
        ("key", "write_key", 16),
        ("iv", "write_iv", 12),
        ("finished", "finished_key", 32),
    ],
)
def test_rfc8448_validates_the_oracle(label: str, field: str, length: int) -> None:
    """The oracle's HkdfLabel layout reproduces TLS 1.3 (RFC 8448) with the ``tls13 `` prefix."""
    anchor = KS["rfc8448_expand_label"]
    secret = h(anchor["client_handshake_traffic_secret"])
    assert oracle_label(secret, b"tls13 ", label.encode(), b"", length).hex() == anchor[field]


@pytest.mark.parametrize("label", ["c hs", "s hs", "master", "finished", "traffic", "key", "iv"])
@pytest.mark.parametrize("name", ["sha256", "sha384"])
def test_expand_label_matches_oracle_with_npamp_prefix(label: str, name: ks.HashName) -> None:
    secret = bytes(range(48))
    ctx = bytes(range(13))
    got = ks.hkdf_expand_label(secret, label, ctx, 40, name)
    assert got == oracle_label(secret, b"n-pamp ", label.encode(), ctx, 40, name)
    assert got != oracle_label(secret, b"tls13 ", label.encode(), ctx, 40, name)


def test_key_schedule_kat_ladder_against_oracle() -> None:
    """The fixed inputs of key-schedule-kat.json through the module and through the oracle."""
    inp = KS["npamp_inputs"]
    mlkem_ss, x_ss = h(inp["ikm_mlkem_ss"]), h(inp["ikm_x25519_ss"])
    th_kem, th_ccv = h(inp["th_kem"]), h(inp["th_ccv"])
    hs_oracle = hmac.new(bytes(32), mlkem_ss + x_ss, "sha256").digest()
    hs = ks.handshake_secret(mlkem_ss, x_ss, "sha256")
    assert hs == hs_oracle
    assert ks.handshake_secret(x_ss, mlkem_ss, "sha256") != hs  # ML-KEM first
    c_hs = ks.c_hs_secret(hs, th_kem, "sha256")
    assert c_hs == oracle_label(hs, b"n-pamp ", b"c hs", th_kem, 32)
    assert ks.s_hs_secret(hs, th_kem, "sha256") == oracle_label(hs, b"n-pamp ", b"s hs", th_kem, 32)
    assert ks.master_secret(hs, th_ccv, "sha256") == oracle_label(
        hs, b"n-pamp ", b"master", th_ccv, 32
    )
    ctx = bytes([0]) + bytes(8) + b"\x00\x01" + b"\x00\x00"
    ts = oracle_label(c_hs, b"n-pamp ", b"traffic", ctx, 32)
    assert ks.traffic_secret(c_hs, 0, 0, 1, 0, "sha256") == ts
    assert ks.traffic_keys(ts, "sha256") == (
        oracle_label(ts, b"n-pamp ", b"key", b"", 32),
        oracle_label(ts, b"n-pamp ", b"iv", b"", 12),
    )
    assert ks.finished_key(c_hs, "sha256") == oracle_label(c_hs, b"n-pamp ", b"finished", b"", 32)


def test_flow_kat_secret_ladder() -> None:
    """Every secret, key and IV of handshake-flow-kat.json from its KEM secrets and TH points."""
    inp, exp = FLOW["inputs"], FLOW["expected"]
    sec, th = exp["secrets"], exp["transcript"]
    assert h(inp["combined_secret"]) == h(inp["mlkem_shared_secret"]) + h(
        inp["x25519_shared_secret"]
    )
    hs = ks.handshake_secret(
        h(inp["mlkem_shared_secret"]), h(inp["x25519_shared_secret"]), "sha256"
    )
    assert hs.hex() == sec["handshake_secret"]
    c_hs = ks.c_hs_secret(hs, h(th["th_kem"]), "sha256")
    s_hs = ks.s_hs_secret(hs, h(th["th_kem"]), "sha256")
    assert (c_hs.hex(), s_hs.hex()) == (sec["c_hs_secret"], sec["s_hs_secret"])
    for side, parent, direction in (("c", c_hs, 0), ("s", s_hs, 1)):
        ts = ks.traffic_secret(parent, direction, 0, 0x0001, 0x0000, "sha256")
        assert ts.hex() == sec[f"{side}_hs_traffic_secret"]
        key, iv = ks.traffic_keys(ts, "sha256")
        assert (key.hex(), iv.hex()) == (sec[f"{side}_hs_key"], sec[f"{side}_hs_iv"])
    assert ks.finished_key(c_hs, "sha256").hex() == exp["finished_keys"]["client"]
    assert ks.finished_key(s_hs, "sha256").hex() == exp["finished_keys"]["server"]
    master = ks.master_secret(hs, h(th["th_ccv"]), "sha256")
    assert master.hex() == sec["master_secret"]
    for side, direction in (("c2s", 0), ("s2c", 1)):
        ts = ks.traffic_secret(master, direction, 0, 0x0001, 0x0000, "sha256")
        assert ts.hex() == sec[f"app_{side}_traffic_secret"]
        key, iv = ks.application_keys(master, direction, 0, 0x0001, 0x0000, "sha256")
        assert (key.hex(), iv.hex()) == (sec[f"app_{side}_key"], sec[f"app_{side}_iv"])


def test_phases_and_tuples_never_share_keys() -> None:
    """Same tuple under different parents, or one field changed, gives a different key."""
    a, b = bytes(32), bytes([1]) * 32
    base = ks.application_keys(a, 0, 0, 1, 0, "sha256")
    assert ks.application_keys(b, 0, 0, 1, 0, "sha256") != base
    for args in ((1, 0, 1, 0), (0, 1, 1, 0), (0, 0, 2, 0), (0, 0, 1, 13)):
        assert ks.application_keys(a, *args, "sha256") != base


def test_sha384_row_lengths() -> None:
    hs = ks.handshake_secret(bytes(32), bytes(32), "sha384")
    assert len(hs) == 48 == ks.hash_len("sha384")
    assert hs == hmac.new(bytes(48), bytes(64), "sha384").digest()
    assert len(ks.c_hs_secret(hs, hashlib.sha384().digest(), "sha384")) == 48
    key, iv = ks.application_keys(hs, 1, 3, 2, 13, "sha384")
    assert (len(key), len(iv)) == (32, 12)


def test_finished_verify_is_exact() -> None:
    fk, th = bytes(32), bytes(range(32))
    mac = ks.finished_mac(fk, th, "sha256")
    assert ks.verify_finished(fk, th, mac, "sha256")
    assert not ks.verify_finished(fk, th, mac[:-1] + bytes([mac[-1] ^ 1]), "sha256")
    assert not ks.verify_finished(fk, th, mac[:16], "sha256")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((2, 0, 1, 0), "direction"),
        ((0, 1 << 64, 1, 0), "epoch"),
        ((0, 0, 0x10000, 0), "u16"),
        ((0, 0, 1, -1), "u16"),
    ],
)
def test_traffic_context_rejects_out_of_range(
    args: tuple[int, int, int, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ks.traffic_context(*args)


def test_expand_label_rejects_oversized_fields() -> None:
    with pytest.raises(ValueError):
        ks.hkdf_expand_label(bytes(32), "x" * 250, b"", 32, "sha256")
    with pytest.raises(ValueError):
        ks.hkdf_expand_label(bytes(32), "key", bytes(256), 32, "sha256")
    with pytest.raises(ValueError):
        ks.hkdf_expand_label(bytes(32), "key", b"", 0, "sha256")
    with pytest.raises(ValueError):
        ks.hash_len("md5")  # type: ignore[arg-type]


@given(
    prk=st.binary(max_size=80),
    info=st.binary(max_size=300),
    length=st.integers(1, 400),
    hash_name=st.sampled_from(["sha256", "sha384"]),
)
def test_hkdf_expand_equals_cryptography(
    prk: bytes, info: bytes, length: int, hash_name: ks.HashName
) -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    algorithm = hashes.SHA256() if hash_name == "sha256" else hashes.SHA384()
    expected = HKDFExpand(algorithm=algorithm, length=length, info=info).derive(prk)
    assert ks.hkdf_expand(prk, info, length, hash_name) == expected


@pytest.mark.parametrize("length", [0, 255 * 32 + 1])
def test_hkdf_expand_length_bounds(length: int) -> None:
    with pytest.raises(ValueError):
        ks.hkdf_expand(bytes(32), b"", length, "sha256")
    assert len(ks.hkdf_expand(bytes(32), b"", 255 * 32, "sha256")) == 255 * 32


@given(
    secret=st.binary(min_size=32, max_size=48),
    direction=st.integers(0, 1),
    epoch=st.integers(0, (1 << 64) - 1),
    suite=st.integers(0, 0xFFFF),
    channel=st.integers(0, 0xFFFF),
    hash_name=st.sampled_from(["sha256", "sha384"]),
)
def test_traffic_derivations_equal_expand_label(
    secret: bytes, direction: int, epoch: int, suite: int, channel: int, hash_name: ks.HashName
) -> None:
    """The one-HMAC paths of traffic_secret / traffic_keys are HKDF-Expand-Label exactly."""
    ctx = ks.traffic_context(direction, epoch, suite, channel)
    size = ks.hash_len(hash_name)
    expected = ks.hkdf_expand_label(secret, "traffic", ctx, size, hash_name)
    assert ks.traffic_secret(secret, direction, epoch, suite, channel, hash_name) == expected
    assert ks.traffic_keys(secret, hash_name) == (
        ks.hkdf_expand_label(secret, "key", b"", 32, hash_name),
        ks.hkdf_expand_label(secret, "iv", b"", 12, hash_name),
    )


def test_traffic_derivations_refuse_an_unsupported_hash() -> None:
    with pytest.raises(ValueError, match="unsupported KDF hash"):
        ks.traffic_secret(bytes(32), 0, 0, 1, 0, "md5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unsupported KDF hash"):
        ks.traffic_keys(bytes(32), "md5")  # type: ignore[arg-type]
