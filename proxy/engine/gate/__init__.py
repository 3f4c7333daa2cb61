"""The message gate: rules that pick messages by what they are, and what to do to the ones picked.

`match` holds the message-level rule language (the TUI filter's syntax, for one message), `actions`
what a fault rule does, `rules` a whole fault rule and the gate that decides, message by message,
whether one applies, `messages` what a rule sees of a message and the messages a fault makes. Pure:
no I/O, no clock; randomness comes from the gate's own seeded `random.Random`, so a run can be
reproduced.

The transport asks the gate at two points of an exchange: each client message before it goes on
(`proxy.transport.faults` for pass-through, `proxy.transport.bridge_faults` before a bridge takes
it), and each server message before it goes to the client (pass-through). Both points may await
(a delay does), so an action that holds a message until someone releases it (intercept) is one more
`Action` kind decided at the same points, with the same match language.
"""
