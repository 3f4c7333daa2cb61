"""Measurement-only switches for `bench/inproc.py` / `bench/instructions.sh` (on PYTHONPATH, never in
`proxy/`): each takes a part of the admin API's work away, so its cost shows by difference.

X_NOQUEUE=1     the sink keeps nothing (as with the admin API off), the metrics still count
X_NOMETRICS=1   the metrics count nothing
X_NORETAIN=N    the queue keeps at most N batches (a deque's maxlen), never sheds (its bounds raised)
X_RATE=N        the rate bound on unwatched history is N a second, its burst spent at start
X_GCSTATS=1     prints the collections and their time by generation at exit
"""

import os

if os.environ.get("X_NOQUEUE"):
    from proxy.flows import sink as _sink

    _init = _sink.ObservationSink.__init__

    def _no_queue(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["keep"] = False
        _init(self, *args, **kwargs)

    _sink.ObservationSink.__init__ = _no_queue  # type: ignore[method-assign]

if os.environ.get("X_NOMETRICS"):
    from proxy.transport import metric_ops as _ops

    _ops.OpCounter.observe_all = lambda self, batch: None  # type: ignore[method-assign]

if os.environ.get("X_NORETAIN"):
    from collections import deque

    from proxy.flows import sink as _sink2

    _init2 = _sink2.ObservationSink.__init__

    def _short(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["backlog"], kwargs["max_bytes"] = 10**12, 10**15
        _init2(self, *args, **kwargs)
        self._pending = deque(maxlen=int(os.environ["X_NORETAIN"]))

    _sink2.ObservationSink.__init__ = _short  # type: ignore[method-assign]

if os.environ.get("X_RATE"):
    from proxy.flows import unwatched as _unwatched

    _init3 = _unwatched.UnwatchedHistory.__init__

    def _rate(self, rate, *args, **kwargs):  # type: ignore[no-untyped-def]
        _init3(self, int(os.environ["X_RATE"]), *args, **kwargs)
        self._tokens = 0.0

    _unwatched.UnwatchedHistory.__init__ = _rate  # type: ignore[method-assign]

if os.environ.get("X_GCSTATS"):
    import atexit
    import gc
    import sys
    import time

    _acc: dict[str, list[float]] = {"n": [0, 0, 0], "t": [0.0, 0.0, 0.0], "s": [0.0]}

    def _gc(phase, info):  # type: ignore[no-untyped-def]
        if phase == "start":
            _acc["s"][0] = time.perf_counter()
        else:
            generation = info["generation"]
            _acc["n"][generation] += 1
            _acc["t"][generation] += time.perf_counter() - _acc["s"][0]

    gc.callbacks.append(_gc)
    atexit.register(lambda: print("GC", _acc["n"], [round(x * 1000, 1) for x in _acc["t"]], "ms", file=sys.stderr))
