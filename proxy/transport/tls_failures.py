"""How a failed TLS handshake with the upstream is described: OpenSSL's words, plus what they leave out.

Python's ssl ignores an `SSL_CERT_FILE` or `SSL_CERT_DIR` that names nothing, so a user who set one
(with a typo, or a secret that was not mounted) sees only "unable to get local issuer certificate";
the description says the file is missing (`proxy.engine.faults.NO_SUCH_CA_FILE`). The path is the
user's own configuration, no secret.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

from proxy.engine.faults import NO_SUCH_CA_FILE

CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")
"""The variables through which OpenSSL (and so the proxy) is given a CA to trust."""


def certificate_refused(exc: ssl.SSLError, env: Mapping[str, str] = os.environ) -> str:
    """OpenSSL's refusal of the upstream's certificate, with a CA variable that names nothing said."""
    detail = str(exc) or type(exc).__name__
    for name in CA_VARIABLES:
        path = env.get(name)
        if path and not os.path.exists(path):
            detail += f"; {name} names {path}, {NO_SUCH_CA_FILE} (Python then ignores it without a word)"
    return detail
