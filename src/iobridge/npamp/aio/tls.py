"""TLS 1.3 contexts for the N-PAMP TCP binding, and a self-signed certificate for tests/dev.

The binding (draft §10.1, digest §2.8) requires TLS 1.3 as a minimum and ALPN exactly
``n-pamp/2``; the asyncio shell refuses a connection where it was not negotiated.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["ALPN", "client_ssl_context", "self_signed_certificate", "server_ssl_context"]

#: The only ALPN identifier offered or accepted (draft §10.1); "n-pamp/1" is deprecated.
ALPN = "n-pamp/2"


def _tls13(ctx: ssl.SSLContext) -> ssl.SSLContext:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols([ALPN])
    return ctx


def server_ssl_context(certfile: str | Path, keyfile: str | Path) -> ssl.SSLContext:
    """TLS 1.3-only server context offering ALPN ``n-pamp/2``, issuing no session tickets.

    Every association runs the N-PAMP handshake afresh whatever TLS resumes, and asyncio
    clients cannot resume a TLS session at all; OpenSSL's two tickets per connection would
    cost the server their sealing and the client their parsing, and buy nothing.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certfile, keyfile)
    ctx.num_tickets = 0
    return _tls13(ctx)


def client_ssl_context(cafile: str | Path | None = None, *, verify: bool = True) -> ssl.SSLContext:
    """TLS 1.3-only client context offering ALPN ``n-pamp/2``.

    Build it once and share it: a context serves any number of connections, and building one
    that loads the system CA store costs tens of milliseconds.

    Args:
        cafile: Trust anchors (e.g. a self-signed certificate); system store when ``None``.
        verify: Check the server certificate and host name. N-PAMP authenticates identities
            on its own, so turning this off still leaves peers authenticated by their keys;
            then no trust anchor is loaded at all (``cafile`` is ignored).
    """
    if not verify:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return _tls13(ctx)
    return _tls13(ssl.create_default_context(cafile=str(cafile) if cafile else None))


def self_signed_certificate(directory: str | Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """Write a one-day self-signed P-256 certificate and key for ``host`` and ``localhost``.

    Returns:
        ``(certfile, keyfile)`` paths in ``directory``.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([alt, x509.DNSName("localhost")]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = Path(directory) / "npamp-cert.pem", Path(directory) / "npamp-key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile
