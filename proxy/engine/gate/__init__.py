"""The message gate: rules that pick messages by what they are, and what to do to the ones picked.

`match` holds the message-level rule language (the TUI filter's syntax, for one message), `actions`
what a fault rule does, `rules` a whole fault rule and the gate that decides, message by message,
whether one applies. Pure: no I/O, no clock; randomness comes from a seeded `random.Random` the
caller owns, so a run can be reproduced.
"""
