"""Sans-IO protocol engines: `handle(event) -> list[Command]`.

Events are past-tense facts the transport observed; commands are orders the transport carries out.
No asyncio, no clock, no I/O, no logging (logging is a command).

The two bridges are packages named by who sits in front: `legacy_client` (a legacy client, a
2026-07-28 server) and `modern_client` (a 2026-07-28 client, a legacy server). What both use lives
beside them: the vocabulary (`events`, `commands`), one leg record (`legs`) and its resumption rule
(`resume`), one fault wording (`faults`), one tool-header map (`tool_headers`), the relayed client
headers (`relayed`) and the capability tables (`capabilities`). Pass-through's decisions are plain
functions (`passthrough`); `select` picks the mode from the two eras.
"""
