import os
from proxy.flows import sink
if os.environ.get("X_NOQUEUE"):
    orig = sink.ObservationSink.__init__
    def init(self, *a, **k):
        orig(self, *a, **k); self.keep = False
    sink.ObservationSink.__init__ = init
if os.environ.get("X_NOMETRICS"):
    from proxy.transport import metric_ops
    metric_ops.OpCounter.observe_all = lambda self, batch: None
if os.environ.get("X_NOWEIGHT"):
    import proxy.flows.sink as s
    s.value_weight = lambda raw, size: size
if os.environ.get("X_NORETAIN"):
    def f(self, entry):
        pass
    sink.ObservationSink._enqueue = f
if os.environ.get("X_STRIP"):
    from proxy.flows.observations import MessageSeen, ExchangeOpened, ResponseHeadSeen
    _enq = sink.ObservationSink._enqueue
    strip = os.environ["X_STRIP"]
    sa = object.__setattr__
    E = {}
    def g(self, entry):
        for o in entry[0]:
            k = type(o)
            if k is MessageSeen and "b" in strip:
                sa(o, "msg", None)
            elif (k is ExchangeOpened or k is ResponseHeadSeen) and "h" in strip:
                sa(o, "headers", E)
        _enq(self, entry)
    sink.ObservationSink._enqueue = g
if os.environ.get("X_NOGC"):
    import gc
    from proxy import runtime
    def t():
        gc.collect(); gc.freeze(); gc.disable()
    runtime.tune_gc = t
if os.environ.get("X_GCSTATS"):
    import gc, atexit
    atexit.register(lambda: print("gcstats", gc.get_stats(), gc.get_threshold(), flush=True))
if os.environ.get("X_NOSHED"):
    sink.ObservationSink._shed = lambda self: None
if os.environ.get("X_SHEDALL"):
    def sh(self):
        self._pending.clear(); self._count = 0; self._bytes = 0
    sink.ObservationSink._shed = sh
if os.environ.get("X_SHEDSTEP"):
    import inspect, textwrap
    src = textwrap.dedent(inspect.getsource(sink.ObservationSink._shed))
    step = os.environ["X_SHEDSTEP"]
    src = src.replace("backlog - backlog // 16", f"backlog - {step}").replace("max_bytes - max_bytes // 16", "max_bytes - 4096")
    ns = dict(vars(sink))
    exec(src, ns)
    sink.ObservationSink._shed = ns["_shed"]
if os.environ.get("X_KEYONLY"):
    _enq2 = sink.ObservationSink._enqueue
    def ko(self, entry):
        _enq2(self, ((None,) * len(entry[0]), entry[1], entry[2]))
    sink.ObservationSink._enqueue = ko
if os.environ.get("X_RING"):
    RING = bytearray(8 << 20)
    pos = [0]
    import orjson
    def rg(self, entry):
        p = pos[0]
        b = entry[2].encode()
        n = len(b)
        if p + n > len(RING):
            p = 0
        RING[p:p+n] = b
        pos[0] = p + n
    sink.ObservationSink._enqueue = rg
