"""What a client is told when the upstream fails its request: one wording for pass-through and bridges.

Each text says what happened, the detail the transport saw, and what the user can do about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from proxy.engine.commands import BridgeCommand, EndClientResponse, ReplyJson

FAULT_TEXT: Final[dict[str, str]] = {
    "unreachable": "the upstream MCP server is unreachable",
    "bad_response": "the upstream MCP server was reached, but its response was broken or cut off",
    "timeout": "the upstream MCP server did not answer in time",
    "body_timeout": "the upstream MCP server stopped sending its answer",
    "cut": "the upstream MCP server cut the response stream",
    "unsendable": "the proxy cannot send this request upstream as it is",
    "head_too_large": "the upstream MCP server's response head is too large",
    "era_unknown": "the upstream MCP server is not reachable yet",
    "tls_refused": "the proxy refused the upstream MCP server's TLS certificate",
    "wrong_scheme": "the upstream MCP server speaks another scheme than --upstream names",
    "over_budget": "the proxy had no room to hold the upstream MCP server's answer",
}
"""Keyed by the transport's fault kinds (`UpstreamError.kind`, a leg's failure reason)."""

FAULT_HINT: Final[dict[str, str]] = {
    "unreachable": "check that the MCP server is running and that --upstream names it",
    "timeout": "a server this slow needs a larger --upstream-timeout",
    "body_timeout": "a server this slow between reads needs a larger --upstream-body-idle-timeout",
    "cut": "the MCP server's own log says why it stopped",
    "bad_response": "the MCP server's own log says what it sent, or why it stopped",
    "head_too_large": "raise upstream_max_head_bytes if the server's headers are meant to be this large",
    "over_budget": "retry shortly, or raise max_response_bytes_in_flight if the proxy has the memory for "
    "answers this large at once",
    "tls_refused": "retrying will not help: give the proxy the CA that signs the server's certificate with "
    "SSL_CERT_FILE=/path/to/ca.pem (only the system's CAs are trusted otherwise)",
}
"""What the user can do about a fault, where the detail does not already say it."""

BEFORE_ANY_HEAD: Final = frozenset(
    {"unreachable", "era_unknown", "unsendable", "tls_refused", "wrong_scheme"}
)
"""Fault kinds of a request that got no response at all: the status an earlier response on the same
leg had (a GET stream before its resume) says nothing of them, and is not quoted with them."""


NAME_MISMATCH: Final = ("Hostname mismatch", "IP address mismatch")
"""What OpenSSL says when the certificate is trusted but made out for another name than the one dialled."""

NO_SUCH_CA_FILE: Final = "which does not exist"
"""Said (by `proxy.transport.tls_failures`) of an `SSL_CERT_FILE` or `SSL_CERT_DIR` naming nothing:
Python's ssl ignores such a variable without a word, so the detail says it."""

NAME_MISMATCH_HINT: Final = (
    "retrying will not help, nor will another CA: the certificate is trusted but made out for other "
    "names; give --upstream a host name the certificate is for (or the server a certificate for this one)"
)
"""What to do when the certificate is for another name: the CA is not the problem."""

NO_SUCH_CA_FILE_HINT: Final = (
    "retrying will not help: point SSL_CERT_FILE at the PEM file of the CA that signs the server's "
    "certificate (a path the proxy's process can read)"
)
"""What to do when the CA file the user named is not there (a typo, a secret not mounted)."""


def tls_hint(detail: str) -> str:
    """What to do about a refused certificate, from what the refusal says: a name the certificate is
    not for, a CA file that is not there, or (else) a CA the proxy does not know."""
    if any(words in detail for words in NAME_MISMATCH):
        return NAME_MISMATCH_HINT
    if NO_SUCH_CA_FILE in detail:
        return NO_SUCH_CA_FILE_HINT
    return FAULT_HINT["tls_refused"]


SPEAKS_PLAIN: Final = "the upstream answered the TLS handshake in plain HTTP"
"""Said (by `proxy.transport.tls_failures`) of an `https://` upstream whose port speaks plain HTTP."""
SPEAKS_TLS: Final = "a TLS handshake on that port succeeds"
"""Said (by the era probe) of an `http://` upstream that dropped a plain request and speaks TLS."""

SCHEME_HINTS: Final = (
    (SPEAKS_PLAIN, "retrying will not help: the upstream speaks plain HTTP there: use http:// in --upstream"),
    (SPEAKS_TLS, "retrying will not help: the upstream speaks HTTPS there: use https:// in --upstream"),
)
"""What to do about each scheme mix-up, by what its detail says."""


def setup_fault(problem: str) -> str | None:
    """The fault kind of a failure to reach the upstream that is a setup to fix, not a server still
    starting (`tls_refused`, `wrong_scheme`), or None: no retry gets past either."""
    if tls_refused(problem):
        return "tls_refused"
    if any(said in problem for said, _ in SCHEME_HINTS):
        return "wrong_scheme"
    return None


def fault_hint(reason: str, detail: str) -> str | None:
    """What the user can do about a fault: for a setup fault, what its detail says is wrong."""
    if reason == "tls_refused":
        return tls_hint(detail)
    if reason == "wrong_scheme":
        return next((hint for said, hint in SCHEME_HINTS if said in detail), None)
    return FAULT_HINT.get(reason)


def tls_refused(problem: str) -> bool:
    """Whether a failure to reach the upstream is its TLS certificate being refused: a setup to fix,
    not a server still starting, so no retry will get past it."""
    return "CERTIFICATE_VERIFY_FAILED" in problem or "certificate verify failed" in problem


def fault_text(reason: str, detail: str = "") -> str:
    """The message for a fault: what happened, its detail, and (in parentheses) what to do."""
    if reason == "unreachable":  # a bridge's leg meets the certificate (or the scheme) too
        reason = setup_fault(detail) or reason
    text = FAULT_TEXT.get(reason, f"the upstream request failed ({reason})")
    if detail:
        text = f"{text}: {detail}"
    hint = fault_hint(reason, detail)
    if "check --" in detail.lower():  # the detail already says what to do (a stdio command's start)
        hint = None
    return f"{text} ({hint})" if hint else text


def fault_outcome(reason: str) -> str:
    """How an exchange ended by an upstream fault is recorded (`upstream_unreachable`, ...)."""
    return f"upstream_{reason}"


def ended_by_fault(commands: Sequence[BridgeCommand], reason: str) -> list[BridgeCommand]:
    """A bridge's orders for a leg's fault, each client exchange they end marked with the fault's
    outcome: the log line, the chain and the span then name the cause as pass-through names it,
    not only the JSON-RPC error the proxy made of it."""
    outcome = fault_outcome(reason)
    marked: list[BridgeCommand] = []
    for command in commands:
        if (
            isinstance(command, ReplyJson | EndClientResponse)
            and command.outcome is None
            and (isinstance(command, EndClientResponse) or command.status >= 500)
        ):
            command = replace(command, outcome=outcome)
        marked.append(command)
    return marked
