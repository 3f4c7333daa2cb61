"""How a failed TLS handshake with the upstream is described: OpenSSL's words, plus what they leave out.

Python's ssl ignores an `SSL_CERT_FILE` or `SSL_CERT_DIR` that names nothing, so a user who set one
(with a typo, or a secret that was not mounted) sees only "unable to get local issuer certificate";
the description says the file is missing (`proxy.engine.faults.NO_SUCH_CA_FILE`). The path is the
user's own configuration, no secret.

A scheme mix-up is told apart from a server still starting, since no retry fixes it: an `https://`
upstream whose port answers the handshake in plain HTTP (OpenSSL's "wrong version number"), and an
`http://` one whose port drops a plain request but completes a TLS handshake (`speaks_tls`, asked by
the era probe only; the handshake is not verified, since it only asks which protocol the port speaks,
and nothing is sent over it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Mapping

from proxy.engine.faults import NO_SUCH_CA_FILE, SPEAKS_PLAIN
from proxy.transport.dialing import open_tcp

CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")
"""The variables through which OpenSSL (and so the proxy) is given a CA to trust."""


PLAIN_ANSWER_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE", "HTTP_REQUEST"}
)
"""OpenSSL's reasons (3.0 and later) for a handshake answered by bytes that are no TLS record: an
HTTP server's reply to the ClientHello."""


def handshake_failed(exc: ssl.SSLError, env: Mapping[str, str] = os.environ) -> str:
    """A TLS handshake that failed: OpenSSL's words, and what they leave out (a CA variable naming
    nothing, a port that answered in plain HTTP)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return certificate_refused(exc, env)
    detail = str(exc) or type(exc).__name__
    if exc.reason in PLAIN_ANSWER_REASONS:
        detail += f"; {SPEAKS_PLAIN}"
    return detail


async def speaks_tls(host: str, port: int, limit_s: float) -> bool:
    """Whether a TLS handshake with host:port completes within `limit_s` (certificate unchecked)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(limit_s):
            _, writer = await open_tcp(host, port, tls=context)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(limit_s):
            await writer.wait_closed()
    return True


def certificate_refused(exc: ssl.SSLError, env: Mapping[str, str] = os.environ) -> str:
    """OpenSSL's refusal of the upstream's certificate, with a CA variable that names nothing said."""
    detail = str(exc) or type(exc).__name__
    for name in CA_VARIABLES:
        path = env.get(name)
        if path and not os.path.exists(path):
            detail += f"; {name} names {path}, {NO_SUCH_CA_FILE} (Python then ignores it without a word)"
    return detail
