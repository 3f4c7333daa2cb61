"""The I/O shell, the only room that awaits: the aiohttp app, the upstream client, the driver that feeds
engine events and executes commands, and (later) the admin API.
"""
