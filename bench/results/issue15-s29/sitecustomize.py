import os, dataclasses
from proxy.flows import sink
from proxy.flows.observations import MessageSeen, ExchangeOpened, ResponseHeadSeen
_enqueue = sink.ObservationSink._enqueue
_EMPTY = {}
if os.environ.get("X_KEYONLY"):
    def f(self, entry):
        _enqueue(self, ((None,) * len(entry[0]), entry[1], entry[2]))
    sink.ObservationSink._enqueue = f
if os.environ.get("X_NOBODY") or os.environ.get("X_NOHEAD"):
    nobody = bool(os.environ.get("X_NOBODY")); nohead = bool(os.environ.get("X_NOHEAD"))
    def g(self, entry):
        out = []
        for o in entry[0]:
            k = type(o)
            if nobody and k is MessageSeen:
                o = dataclasses.replace(o, msg=None)
            elif nohead and (k is ExchangeOpened or k is ResponseHeadSeen):
                o = dataclasses.replace(o, headers=_EMPTY)
            out.append(o)
        _enqueue(self, (tuple(out), entry[1], entry[2]))
    sink.ObservationSink._enqueue = g
