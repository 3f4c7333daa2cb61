"""Sans-IO protocol engines: `handle(event) -> list[Command]`.

Events are past-tense facts the transport observed; commands are orders the transport carries out.
No asyncio, no clock, no I/O, no logging (logging is a command).
"""
