"""Measurement-only switches for `bench/results/issue15-s23/rotate.sh` (never on a user's path).

Put this folder on PYTHONPATH of the proxy under test, with one of the variables set:
X_NOMETRICS=1 (metrics not counted), X_NOQUEUE=1 (observations not queued for a later reader),
X_PICKLE=1 (each queued batch kept pickled), X_MARSHAL=1 (each queued batch kept as orjson bytes of
plain tuples). The last two leave the queue unreadable: they measure the cost of keeping only.
"""

import os

if os.environ.get("X_NOMETRICS"):
    from proxy.transport import metric_ops

    metric_ops.OpCounter.observe_all = lambda self, batch: None

if os.environ.get("X_NOQUEUE"):
    from proxy.flows import sink

    _init = sink.ObservationSink.__init__

    def _no_keep(self, *args, **kwargs):
        kwargs["keep"] = False
        _init(self, *args, **kwargs)

    sink.ObservationSink.__init__ = _no_keep

if os.environ.get("X_PICKLE"):
    import pickle

    from proxy.flows import sink

    _enqueue = sink.ObservationSink._enqueue

    def _pickled(self, entry):
        _enqueue(self, (pickle.dumps(entry[0], 5), entry[1], entry[2]))

    sink.ObservationSink._enqueue = _pickled

if os.environ.get("X_MARSHAL"):
    import orjson

    from proxy.flows import sink
    from proxy.flows.observations import MessageSeen

    _enqueue = sink.ObservationSink._enqueue

    def _marshalled(self, entry):
        out = []
        for o in entry[0]:
            if type(o) is MessageSeen:
                out.append((o.t, o.exchange, o.msg.raw, o.size, o.direction, o.channel, o.side, o.sse_id, o.note))
            else:
                out.append(tuple(getattr(o, f) for f in o.__slots__))
        _enqueue(self, (orjson.dumps(out), entry[1], entry[2]))

    sink.ObservationSink._enqueue = _marshalled
