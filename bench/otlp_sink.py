"""A discarding OTLP/HTTP collector for the benchmark: reads each export request, answers 200, keeps nothing.

It stands in for a collector on another machine: the `ours-otel` path exports to it, so what the
benchmark measures is the proxy's own cost of tracing (following, queueing, encoding and posting
spans), not a collector's. Counts the requests and bytes it read, printed on SIGTERM.

    python bench/otlp_sink.py --port 4318
"""

from __future__ import annotations

import argparse
import asyncio
import signal

OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n"
    b"Connection: keep-alive\r\n\r\n"
)


class Tally:
    requests = 0
    bytes = 0


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            Tally.requests += 1
            Tally.bytes += length
            writer.write(OK)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = await asyncio.start_server(serve, "127.0.0.1", args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    print(f"otlp-sink: {Tally.requests} requests, {Tally.bytes} bytes", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
