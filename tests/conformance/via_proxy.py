"""``python -m tests.conformance.via_proxy CLIENT... URL``: a conformance client run through `mcp-proxy`.

The suite's ``client`` mode runs a command with the scenario server's URL appended; this command
starts the real `mcp-proxy` in front of that URL (its era probed, as by default) and runs CLIENT
against the proxy's endpoint for the same path, so the suite's mock server judges what reaches it
through the proxy, the proxy's own era probe included. It exits with the client's status.
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit

from tests.sidecar import ProxyProcess, clean_env, settings_env

CLIENT_SECONDS = 60
"""How long the client may run."""


def main(argv: list[str]) -> int:
    """Run the client through a proxy in front of the last argument's URL; the client's exit status."""
    *client, url = argv
    env = clean_env(**settings_env(upstream=url, admin_enabled="false"))
    with ProxyProcess(env) as proxy:
        path = urlsplit(url).path or "/"
        return subprocess.run([*client, proxy.endpoint(path)], timeout=CLIENT_SECONDS, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
