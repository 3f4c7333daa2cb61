"""Reads a HAR file back with haralyzer, as another Python tool would; run in ``.cache/peers/har``.

    .cache/peers/har/bin/python tests/peers/har_read.py FILE.har

Prints one JSON object: the log's creator and version as haralyzer parsed them, and per entry what
haralyzer makes of it (method, URL, status and its text, response headers, MIME type and text, request
headers, start time) with the entry's `_mcp` field as it stands. Standard library and haralyzer only.
"""

from __future__ import annotations

import json
import sys

from haralyzer import HarEntry, HarParser


def main(path: str) -> None:
    parser = HarParser.from_file(path)
    entries = []
    for raw in parser.har_data["entries"]:
        entry = HarEntry(raw)
        entries.append(
            {
                "method": entry.request.method,
                "url": entry.url,
                "status": entry.status,
                "status_text": entry.response.statusText,
                "response_headers": entry.response.headers,
                "mime": entry.response.mimeType,
                "text": entry.response.text,
                "request_headers": entry.request.headers,
                "request_text": entry.request.text,
                "start": entry.startTime.isoformat(),
                "mcp": raw.get("_mcp"),
            }
        )
    creator = parser.creator
    print(json.dumps({"version": parser.version, "creator": creator, "entries": entries}))


if __name__ == "__main__":
    main(sys.argv[1])
