"""The memory estimate of decoded JSON: near or above what decoding really allocates, never far below."""

from __future__ import annotations

import random
import string
import tracemalloc
from typing import Any

import orjson
import pytest

from proxy.wire.weight import SMALL_TEXT, WORST_RATIO, text_weight, value_weight


def _decoded_size(text: bytes) -> int:
    """Bytes `orjson.loads(text)` allocates and keeps, as tracemalloc counts them."""
    tracemalloc.start()
    try:
        tracemalloc.clear_traces()
        value = orjson.loads(text)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del value
    return kept


_RANDOM = random.Random(7)

SHAPES: dict[str, Any] = {
    "one-member objects": [{"a": 1} for _ in range(5000)],
    "empty objects": [{} for _ in range(5000)],
    "records": [
        {"name": f"n{i}", "value": "v" * 20, "n": i, "ok": True, "tags": ["a", "b"]} for i in range(2000)
    ],
    "a wide object": {f"key{i}": i for i in range(5000)},
    "nested lists": [[[1, 2], [3, 4]] for _ in range(3000)],
    "short strings": ["".join(_RANDOM.choices(string.ascii_letters, k=5)) for _ in range(10000)],
    "big integers": [_RANDOM.randrange(10**6, 10**9) for _ in range(10000)],
    "floats": [_RANDOM.random() for _ in range(10000)],
    "a text result": {"result": {"content": [{"type": "text", "text": "lorem ipsum " * 9000}]}},
    "a tool list": {
        "result": {
            "tools": [
                {
                    "name": f"t{i}",
                    "description": "d" * 80,
                    "inputSchema": {"type": "object", "required": ["a"]},
                }
                for i in range(100)
            ]
        }
    },
    # past the sampled length: text first, then objects, both weighed
    "text then objects": {
        "text": "lorem ipsum dolor sit amet " * 40000,
        "rows": [{"a": i, "b": "x"} for i in range(20000)],
    },
    "many objects": [{"a": 1, "b": "xy"} for _ in range(60000)],
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_estimate_is_never_far_below_what_decoding_keeps_nor_wildly_above(shape: str) -> None:
    text = orjson.dumps(SHAPES[shape])
    kept = _decoded_size(text)

    estimate = text_weight(text)

    assert kept * 0.85 <= estimate <= kept * 4, f"estimate {estimate} for {kept} bytes decoded"


def test_a_list_of_tiny_objects_is_weighed_at_twenty_times_its_text_not_at_its_length() -> None:
    text = orjson.dumps([{"a": 1} for _ in range(8000)])  # 64 KiB, the capture body limit

    assert text_weight(text) > 20 * len(text)
    assert _decoded_size(text) > 20 * len(text)  # what the estimate is for


def test_small_values_are_charged_the_worst_case_and_strings_their_length() -> None:
    small = {"jsonrpc": "2.0", "id": 1, "result": {}}
    size = len(orjson.dumps(small))

    assert size <= SMALL_TEXT
    assert value_weight(small, size) == 64 + WORST_RATIO * size
    assert value_weight(small, size, unlooked=0) == text_weight(orjson.dumps(small))
    assert value_weight("x" * 5000, 5000) == 64 + 5000


def test_a_big_value_is_weighed_by_its_encoding() -> None:
    value = SHAPES["one-member objects"]
    text = orjson.dumps(value)

    assert value_weight(value, len(text)) == text_weight(text)
