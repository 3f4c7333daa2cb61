"""What a running proxy keeps of the bodies it relayed, for whoever reads its chains later.

The admin API is on by default, so a proxy keeps every exchange's observations (queued while
nobody looks) and the chains built from them. Both keep bodies decoded, and a body of many tiny
JSON objects decodes to about twenty times its length: these tests count memory as Python allocates
it (tracemalloc), not wire bytes.
"""

from __future__ import annotations

import gc
import tracemalloc

import orjson

from tests.transport.helpers import RELAY_ONLY, wait_until
from tests.transport.test_front import connection, read_response, request_bytes
from tests.transport.test_front_limits import _AnsweringUpstream

BOUND = 8 * 1024 * 1024
"""The memory bound the tests give the chain store (the queue of observations gets half of it)."""


def rows_call(ident: int) -> bytes:
    """A `tools/call` carrying 58 KiB of one-member objects (about 1.3 MiB once decoded): under the
    capture body limit, so a record keeps it whole."""
    rows = [{"a": 1} for _ in range(7200)]
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": ident,
            "method": "tools/call",
            "params": {"name": "rows", "arguments": {"rows": rows}},
        }
    )


async def test_the_queue_and_the_chain_store_hold_decoded_bodies_within_their_memory_bound(proxy_for) -> None:
    calls = 40  # about 52 MiB of objects decoded, 2.3 MiB of JSON
    upstream = _AnsweringUpstream()
    url = await upstream.start()
    gc.collect()
    tracemalloc.start()
    try:
        async with proxy_for(url, **RELAY_ONLY, max_chain_store_bytes=BOUND) as proxy:
            before = tracemalloc.get_traced_memory()[0]
            async with connection(proxy) as (reader, writer):
                for ident in range(1, calls + 1):
                    writer.write(request_bytes(rows_call(ident)))
                    assert (await read_response(reader)).status == 200
            await wait_until(lambda: proxy.in_flight() == 0, what="the proxy to finish the exchanges")
            queued = tracemalloc.get_traced_memory()[0] - before
            proxy.observations.build()  # someone reads the chains: what waited is built
            built = tracemalloc.get_traced_memory()[0] - before
            kept = [c.summary.jsonrpc_id for c in proxy.store]
            weighed = proxy.store.weight
            dropped = proxy.observations.dropped + proxy.store.evicted
    finally:
        tracemalloc.stop()
        assert upstream.server is not None
        upstream.server.close()
        await upstream.server.wait_closed()
    mib = 1024 * 1024
    assert queued < BOUND / 2 + 4 * mib, f"{queued / mib:.1f} MiB held by observations nobody read yet"
    assert built < BOUND + BOUND / 2 + 4 * mib, f"{built / mib:.1f} MiB held once the chains were built"
    assert 0 < weighed <= BOUND
    assert dropped > 0
    assert calls in kept  # the newest call is there to read
    assert 1 not in kept
