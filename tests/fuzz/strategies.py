"""Inputs shared by the fuzz targets: JSON values, JSON-RPC envelopes and their bytes, mutated."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

ids = (
    st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=16)
    | st.sampled_from([None, True, 1.5, [], {}, "", 'a"b', "\\", "\u2028"])
)
METHODS = ["tools/call", "tools/list", "initialize", "notifications/initialized", "ping", "server/discover"]
methods = st.sampled_from(METHODS) | st.text(max_size=12) | st.sampled_from([1, None, "a\r\nb", "\x00"])


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON-RPC-looking object: each member present or not, valid or not."""
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["id"] = draw(ids)
    if draw(st.integers(0, 9)):
        out["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2.0, None]))
    member = draw(st.sampled_from(["method", "result", "error", "both", "none"]))
    if member == "method":
        out["method"] = draw(methods)
        if draw(st.booleans()):
            out["params"] = draw(json_values)
    if member in ("result", "both"):
        out["result"] = draw(json_values)
    if member in ("error", "both"):
        out["error"] = draw(
            st.fixed_dictionaries({"code": st.integers(-33000, 0), "message": st.text()}) | json_values
        )
    keys = list(out)
    order = draw(st.permutations(keys)) if keys else []
    return {k: out[k] for k in order}


def mutate(data: bytes, draw: st.DrawFn) -> bytes:
    """`data` with a few bytes flipped, cut, inserted or repeated."""
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "cut", "insert", "dup", "truncate"]))
        if op == "flip":
            data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
        elif op == "cut":
            data = data[:at] + data[at + draw(st.integers(1, 8)) :]
        elif op == "insert":
            data = (
                data[:at]
                + draw(st.sampled_from([b"\r\n", b"\x00", b'"', b"{", b"]", b"\xb2", b"\\"]))
                + data[at:]
            )
        elif op == "dup":
            data = data[:at] + data[at:] * 2
        else:
            data = data[:at]
    return data


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """An HTTP body a client might send: an envelope or a batch of them as JSON, maybe mutated."""
    value: Any = draw(envelopes() | st.lists(envelopes(), max_size=4) | json_values)
    data = orjson.dumps(value)
    return mutate(data, draw) if draw(st.booleans()) else data
