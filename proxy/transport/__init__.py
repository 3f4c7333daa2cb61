"""The I/O shell, the only room that awaits: the lean front and the aiohttp app, the upstream clients,
the pass-through relay, the bridge drivers that feed engine events and execute commands, the admin API.
"""
