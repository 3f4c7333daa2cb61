"""The bridge for a 2026-07-28 client in front of a legacy (2025-era) server.

Toward the client it plays a 2026-07-28 server (validation, `server/discover`, `input_required`
with sealed `requestState`, `subscriptions/listen`); toward the upstream a legacy client with
sessions of its own, parking live calls between rounds. `engine.MrtrToLegacyEngine` is the entry;
the other modules are its parts.
"""
