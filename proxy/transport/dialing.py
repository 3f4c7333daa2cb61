"""How the proxy opens a TCP connection to its upstream: every address of its name, raced.

A name with several addresses (a dual-stack Service, a DNS name listing more than one pod) is only as
reachable as the address tried first when the addresses are tried one after another: an address that
drops packets instead of refusing them (a broken IPv6 route, a stale pod IP) spends the whole connect
timeout and the next one is never tried. Happy Eyeballs (RFC 8305) starts the next address after a
short delay while the first one still waits, alternating address families, and keeps whichever
connects first, as browsers, curl and the MCP SDKs' clients do.

The race is aiohappyeyeballs' (aiohttp's own client uses it), not `create_connection`'s
`happy_eyeballs_delay`: uvloop, the loop the proxy runs on, has no such argument. The connected
socket is then handed to the loop, which wraps it (and does the TLS handshake) as usual.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import ssl
from collections.abc import Callable
from typing import TypeVar

import aiohappyeyeballs

P = TypeVar("P", bound=asyncio.Protocol)

HAPPY_EYEBALLS_DELAY = 0.25
"""Seconds an address gets before the next one is tried beside it (RFC 8305's recommended 250 ms)."""

INTERLEAVE = 1
"""Addresses alternate between families (IPv6, IPv4, IPv6, ...), so one broken family costs one delay."""


async def dial(host: str, port: int) -> socket.socket:
    """A socket connected to host:port, its addresses raced; an OSError when none connects, worded
    by the C library (`Connection refused`) when every address failed the same way."""
    loop = asyncio.get_running_loop()
    addresses = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    try:
        return await aiohappyeyeballs.start_connection(
            addresses, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY, interleave=INTERLEAVE, loop=loop
        )
    except OSError as exc:
        code = exc.errno
        if code is None or code not in errno.errorcode:
            raise
        raise OSError(code, os.strerror(code)) from exc


async def connect(
    factory: Callable[[], P], host: str, port: int, *, tls: ssl.SSLContext | None = None
) -> tuple[asyncio.Transport, P]:
    """`loop.create_connection` to host:port with its addresses raced; with `tls`, the handshake done
    and the certificate checked against `host` as the context says."""
    sock = await dial(host, port)
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(
        factory, sock=sock, ssl=tls, server_hostname=host if tls is not None else None
    )
    return transport, protocol


async def open_tcp(
    host: str, port: int, *, tls: ssl.SSLContext | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream connection to host:port, its addresses raced (TLS as in `connect`)."""
    sock = await dial(host, port)
    return await asyncio.open_connection(
        sock=sock, ssl=tls, server_hostname=host if tls is not None else None
    )
