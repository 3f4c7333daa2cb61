"""Host:port and URL values: parsed and checked as settings are (`HOST:PORT`, an http(s) URL, an
OTLP collector's URL), and the URL of a listener once bound.

Pure (stdlib only, beside the proxy's own masking): the settings model, the runtime and the admin
and health servers read the same rules here.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from urllib.parse import SplitResult, urlsplit

from proxy.framing.http import masked_url
from proxy.record.otlp_setup import endpoint_var

_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def parse_host_port(text: str) -> tuple[str, int]:
    """Split `HOST:PORT` (IPv6 as `[::1]:8080`) into a bare host and a port, or raise ValueError."""
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or not rest.startswith(":"):
            raise ValueError(f"expected [IPV6]:PORT, got {text!r}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"not an IPv6 address in {text!r}") from None
        port_text = rest[1:]
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise ValueError(f"expected HOST:PORT, got {text!r}")
        if ":" in host:
            raise ValueError(f"an IPv6 host goes in brackets, as [::1]:8080; got {text!r}")
        if not _HOSTNAME.fullmatch(host):
            raise ValueError(f"not a host name in {text!r}")
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ValueError(f"port must be a number from 0 to 65535 in {text!r}")
    return host, int(port_text)


def base_url(host: str, port: int) -> str:
    """`http://HOST:PORT` for a bound listener, an IPv6 host in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def http_url_parts(value: str, what: str) -> SplitResult:
    """`value` split, if it is an http(s) URL with a host and a valid port; ValueError naming why not."""
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - evaluated only to reject a bad port
    except ValueError:
        raise ValueError(f"bad port in URL: {masked_url(value)!r}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or " " in value:
        raise ValueError(f"not {what}: {masked_url(value)!r}")
    return parts


def otlp_url(value: str) -> str:
    """`value` if it is an http(s) URL an OTLP/HTTP collector can listen at; ValueError naming why not.

    A URL with `user:password@` is refused: credentials go in `OTEL_EXPORTER_OTLP_HEADERS`, where
    nothing prints them.
    """
    parts = http_url_parts(value, "an http(s) URL (OTLP/HTTP)")
    if "@" in parts.netloc:
        raise ValueError(
            "the URL carries credentials (user:password@); give the collector's credentials as "
            "headers in OTEL_EXPORTER_OTLP_HEADERS instead"
        )
    return value


def env_otlp_refusal(environ: Mapping[str, str]) -> str | None:
    """Why the collector a standard variable names is refused, if it is: `VAR=URL is refused: why`.

    The variable's URL gets the checks `otlp_endpoint` gets (`otlp_url`), so a `user:password@`
    refused in one place is refused in the other, and the password never rides along in a URL that
    log lines and `--print-config` name. The URL shown is masked.
    """
    var = endpoint_var(environ)
    if var is None:
        return None
    try:
        otlp_url(environ[var])
    except ValueError as exc:
        return f"{var}={masked_url(environ[var])} is refused: {exc}"
    return None
