"""The test peers' own environments: where they live, how they are built, and the check that they are.

Peers run the way users run them, never inside the proxy's virtualenv:

- Python SDK peers and the Python client CLI run in ``.cache/peers/h11``, a virtualenv holding only
  ``mcp`` (``requirements.txt``) and what it pulls in. That is what ``pip install mcp`` gives a user,
  and with it uvicorn parses HTTP with h11, which routes on the raw request target.
  ``.cache/peers/httptools`` adds ``httptools`` (``requirements-httptools.txt``), for the one run on
  uvicorn's other parser.
- Node peers, clients and the conformance CLI come from the npm registry into ``.cache/node``, by
  ``npm ci`` from the committed ``tests/peers/node/package.json`` and ``package-lock.json``.
  ``tests/peers/node/node_modules`` is a link to ``.cache/node/node_modules``, so the project's own
  scripts beside the lock file resolve their imports the ordinary way.
- The SDK's last 1.x release, the one most servers users run were built on (``pip install 'mcp<2'``),
  in ``.cache/peers/sdk1`` (``requirements-sdk1.txt``), for ``tests.peers.sdk1_server``.
- The SDK's last release that speaks only 2024-11-05 (``pip install 'mcp==1.3.0'``), in
  ``.cache/peers/sdk2024`` (``requirements-sdk2024.txt``), for ``tests.peers.sdk2024_client``: a
  client that refuses any other version in the answer to its ``initialize``.
- The export tests' HAR tools, each apart: the npm ``har-validator`` in ``.cache/har`` (``npm ci``
  from ``tests/peers/har/``, linked there the same way), and the PyPI HAR reader ``haralyzer`` in
  ``.cache/peers/har`` (``requirements-har.txt``), so neither meets the proxy's or the peers' packages.

``python3 -m tests.peers.envs`` builds whatever is missing or stale and skips what is up to date (a
stamp file beside each environment holds the hashes of the files it was built from); ``./scripts/test``
runs it. This module uses the standard library only, so it runs before any virtualenv exists, and the
runners call `peer_python` / `node_modules` to fail early with the command that fixes a missing piece.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "BUILD_COMMAND",
    "HTTP_IMPLEMENTATIONS",
    "LOOPBACK_PRELOAD",
    "NODE20_FS_SHIM",
    "NODE_DIR",
    "NODE_MODULES",
    "REPO_ROOT",
    "EnvironmentMissingError",
    "Http",
    "har_python",
    "har_validator",
    "node_binary",
    "node_modules",
    "node_package",
    "peer_python",
    "sdk1_python",
    "sdk2024_python",
]

Http = Literal["h11", "httptools"]
HTTP_IMPLEMENTATIONS: Final[tuple[Http, ...]] = ("h11", "httptools")

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
PEERS_DIR: Final = REPO_ROOT / "tests" / "peers"
CACHE: Final = REPO_ROOT / ".cache"
PYTHON_ENVS: Final = CACHE / "peers"
NODE_DIR: Final = PEERS_DIR / "node"
NODE_PREFIX: Final = CACHE / "node"
NODE_MODULES: Final = NODE_PREFIX / "node_modules"
NODE_LINK: Final = NODE_DIR / "node_modules"
LOOPBACK_PRELOAD: Final = NODE_DIR / "loopback-only.cjs"
"""``node --require`` it: every TCP listener in the process binds 127.0.0.1 (see the file)."""
NODE20_FS_SHIM: Final = NODE_DIR / "node20-fs.mjs"
"""``node --import`` it: gives the conformance CLI the ``fs.globSync`` that Node 20 lacks."""

HAR_DIR: Final = PEERS_DIR / "har"
HAR_PREFIX: Final = CACHE / "har"
HAR_NODE_MODULES: Final = HAR_PREFIX / "node_modules"
HAR_LINK: Final = HAR_DIR / "node_modules"
HAR_VALIDATE: Final = HAR_DIR / "validate.cjs"
"""``node`` it with a HAR file: prints har-validator's verdict as JSON."""
HAR_PYTHON: Final = PYTHON_ENVS / "har"
_HAR_REQUIREMENTS: Final = (PEERS_DIR / "requirements-har.txt",)
SDK1_PYTHON: Final = PYTHON_ENVS / "sdk1"
_SDK1_REQUIREMENTS: Final = (PEERS_DIR / "requirements-sdk1.txt",)
SDK2024_PYTHON: Final = PYTHON_ENVS / "sdk2024"
_SDK2024_REQUIREMENTS: Final = (PEERS_DIR / "requirements-sdk2024.txt",)
_HAR_INPUTS: Final = (HAR_DIR / "package.json", HAR_DIR / "package-lock.json")

BUILD_COMMAND: Final = "python3 -m tests.peers.envs"
"""What builds every environment (from the repository root); ``./scripts/test`` runs it."""
NODE_MIN_MAJOR: Final = 20
STAMP: Final = ".built-from"
INSTALL_TIMEOUT: Final = 900.0

_REQUIREMENTS: Final[dict[Http, tuple[Path, ...]]] = {
    "h11": (PEERS_DIR / "requirements.txt",),
    "httptools": (PEERS_DIR / "requirements.txt", PEERS_DIR / "requirements-httptools.txt"),
}
_NODE_INPUTS: Final = (NODE_DIR / "package.json", NODE_DIR / "package-lock.json")
_NEEDS_NODE: Final = (
    f"Node {NODE_MIN_MAJOR}+ and npm are needed for the Node peers and the conformance CLI "
    "(Debian/Ubuntu: apt-get install nodejs npm)"
)


class EnvironmentMissingError(RuntimeError):
    """A peer environment is missing or was built from other files than the committed ones."""


def _stamp_text(files: Sequence[Path]) -> str:
    """``<sha256>  <path>`` per input file: what an environment built from `files` records."""
    lines = []
    for path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{digest}  {path.relative_to(REPO_ROOT).as_posix()}\n")
    return "".join(lines)


def _up_to_date(directory: Path, files: Sequence[Path]) -> bool:
    try:
        return (directory / STAMP).read_text(encoding="utf-8") == _stamp_text(files)
    except OSError:
        return False


def _missing(what: str) -> EnvironmentMissingError:
    return EnvironmentMissingError(
        f"{what}; build it with `{BUILD_COMMAND}` from {REPO_ROOT} (./scripts/test does)"
    )


# --------------------------------------------------------------------------------------------
# Checks (the runners call these before starting anything).
# --------------------------------------------------------------------------------------------


def peer_python(http: Http = "h11") -> Path:
    """The interpreter of the Python peer environment whose uvicorn uses `http`; raises if not built."""
    if http not in _REQUIREMENTS:
        raise ValueError(f"unknown HTTP implementation {http!r}; expected one of {HTTP_IMPLEMENTATIONS}")
    directory = PYTHON_ENVS / http
    python = directory / "bin" / "python"
    if not python.exists():
        raise _missing(f"the Python peer environment {directory} does not exist")
    if not _up_to_date(directory, _REQUIREMENTS[http]):
        raise _missing(f"the Python peer environment {directory} was built from other requirements")
    return python


def node_binary() -> str:
    """The ``node`` on PATH, checked to be Node 20 or newer."""
    node = shutil.which("node")
    if node is None:
        raise EnvironmentMissingError(f"node is not on PATH. {_NEEDS_NODE}")
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout.strip()
    try:
        major = int(version.lstrip("v").split(".")[0])
    except ValueError:
        major = 0
    if major < NODE_MIN_MAJOR:
        raise EnvironmentMissingError(f"node {version or '(unknown version)'} is too old. {_NEEDS_NODE}")
    return node


def node_modules() -> Path:
    """``.cache/node/node_modules``, checked to match the committed lock file and to be linked in."""
    if not NODE_MODULES.is_dir():
        raise _missing(f"the Node packages are not installed under {NODE_MODULES}")
    if not _up_to_date(NODE_PREFIX, _NODE_INPUTS):
        raise _missing(f"the Node packages under {NODE_MODULES} were installed from another lock file")
    if not NODE_LINK.is_symlink():
        raise _missing(f"{NODE_LINK} is not linked to {NODE_MODULES}")
    return NODE_MODULES


def har_validator() -> Path:
    """The script that runs npm's har-validator, checked to have its packages installed and linked."""
    if not HAR_NODE_MODULES.is_dir() or not _up_to_date(HAR_PREFIX, _HAR_INPUTS):
        raise _missing(f"har-validator is not installed under {HAR_NODE_MODULES} from the committed lock")
    if not HAR_LINK.is_symlink():
        raise _missing(f"{HAR_LINK} is not linked to {HAR_NODE_MODULES}")
    return HAR_VALIDATE


def har_python() -> Path:
    """The interpreter of the HAR reader's environment (haralyzer); raises if not built."""
    python = HAR_PYTHON / "bin" / "python"
    if not python.exists() or not _up_to_date(HAR_PYTHON, _HAR_REQUIREMENTS):
        raise _missing(f"the HAR reader environment {HAR_PYTHON} is missing or stale")
    return python


def sdk1_python() -> Path:
    """The interpreter of the 1.x SDK's environment; raises if not built."""
    python = SDK1_PYTHON / "bin" / "python"
    if not python.exists() or not _up_to_date(SDK1_PYTHON, _SDK1_REQUIREMENTS):
        raise _missing(f"the 1.x SDK environment {SDK1_PYTHON} is missing or stale")
    return python


def sdk2024_python() -> Path:
    """The interpreter of the 2024-11-05-only SDK's environment; raises if not built."""
    python = SDK2024_PYTHON / "bin" / "python"
    if not python.exists() or not _up_to_date(SDK2024_PYTHON, _SDK2024_REQUIREMENTS):
        raise _missing(f"the 2024-11-05 SDK environment {SDK2024_PYTHON} is missing or stale")
    return python


def node_package(name: str) -> Path:
    """The installed directory of npm package `name` (e.g. ``@modelcontextprotocol/server-everything``)."""
    path = node_modules() / name
    if not (path / "package.json").is_file():
        raise _missing(f"the npm package {name} is not under {NODE_MODULES}")
    return path


# --------------------------------------------------------------------------------------------
# Building.
# --------------------------------------------------------------------------------------------


def _run(cmd: Sequence[str | Path], *, cwd: Path | None = None) -> None:
    printable = " ".join(str(part) for part in cmd)
    try:
        subprocess.run([str(part) for part in cmd], cwd=cwd, check=True, timeout=INSTALL_TIMEOUT)
    except subprocess.CalledProcessError as exc:
        raise EnvironmentMissingError(f"`{printable}` failed with exit code {exc.returncode}") from exc
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentMissingError(f"`{printable}` did not finish within {INSTALL_TIMEOUT:.0f}s") from exc


def _probe(python: Path, code: str) -> bool:
    """Whether `code` runs in the environment of `python` (its output is not needed)."""
    return subprocess.run([python, "-c", code], capture_output=True, timeout=60, check=False).returncode == 0


def build_python(http: Http) -> None:
    """Create (or recreate, when stale) the Python peer environment for `http`."""
    directory = PYTHON_ENVS / http
    files = _REQUIREMENTS[http]
    if _up_to_date(directory, files) and (directory / "bin" / "python").exists():
        print(f"peers: {directory.relative_to(REPO_ROOT)} is up to date")
        return
    print(f"peers: building {directory.relative_to(REPO_ROOT)} from {files[-1].name}", flush=True)
    shutil.rmtree(directory, ignore_errors=True)
    _run([sys.executable, "-m", "venv", directory])
    python = directory / "bin" / "python"
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", files[-1]])
    # The point of the h11 environment is that httptools is absent; say so if a dependency brought it.
    has_httptools = _probe(python, "import httptools")
    if has_httptools != (http == "httptools"):
        raise EnvironmentMissingError(
            f"{directory}: httptools is {'present' if has_httptools else 'absent'}, "
            f"so uvicorn would not run on {http}"
        )
    (directory / STAMP).write_text(_stamp_text(files), encoding="utf-8")


def build_node() -> None:
    """``npm ci`` the committed lock file into ``.cache/node`` and link it beside the lock file."""
    _npm_ci(_NODE_INPUTS, NODE_PREFIX)
    _link_node_modules(NODE_MODULES, NODE_LINK)


def build_har() -> None:
    """The HAR tools: har-validator into ``.cache/har`` (linked), haralyzer into ``.cache/peers/har``."""
    _npm_ci(_HAR_INPUTS, HAR_PREFIX)
    _link_node_modules(HAR_NODE_MODULES, HAR_LINK)
    _build_venv(HAR_PYTHON, _HAR_REQUIREMENTS)


def build_sdk1() -> None:
    """The 1.x SDK's environment, ``.cache/peers/sdk1``."""
    _build_venv(SDK1_PYTHON, _SDK1_REQUIREMENTS)


def build_sdk2024() -> None:
    """The 2024-11-05-only SDK's environment, ``.cache/peers/sdk2024``."""
    _build_venv(SDK2024_PYTHON, _SDK2024_REQUIREMENTS)


def _build_venv(directory: Path, requirements: Sequence[Path]) -> None:
    """A virtualenv holding what `requirements` (one file) install, rebuilt when they changed."""
    if _up_to_date(directory, requirements) and (directory / "bin" / "python").exists():
        print(f"peers: {directory.relative_to(REPO_ROOT)} is up to date")
        return
    print(f"peers: building {directory.relative_to(REPO_ROOT)}", flush=True)
    shutil.rmtree(directory, ignore_errors=True)
    _run([sys.executable, "-m", "venv", directory])
    python = directory / "bin" / "python"
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, "-r", requirements[0]])
    (directory / STAMP).write_text(_stamp_text(requirements), encoding="utf-8")


def _npm_ci(inputs: Sequence[Path], prefix: Path) -> None:
    """``npm ci`` a committed package.json and lock file into `prefix`, unless it is up to date."""
    node_binary()
    if _up_to_date(prefix, inputs) and (prefix / "node_modules").is_dir():
        print(f"peers: {prefix.relative_to(REPO_ROOT)} is up to date")
        return
    npm = shutil.which("npm")
    if npm is None:
        raise EnvironmentMissingError(f"npm is not on PATH. {_NEEDS_NODE}")
    print(f"peers: npm ci into {prefix.relative_to(REPO_ROOT)}", flush=True)
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / STAMP).unlink(missing_ok=True)
    for source in inputs:
        shutil.copyfile(source, prefix / source.name)
    # The conformance CLI declares node >= 22 and runs on 20 with NODE20_FS_SHIM; npm's engine
    # warning about it is expected, hence --loglevel=error.
    _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=prefix)
    (prefix / STAMP).write_text(_stamp_text(inputs), encoding="utf-8")


def _link_node_modules(modules: Path, link: Path) -> None:
    target = os.path.relpath(modules, link.parent)
    if link.is_symlink():
        if os.readlink(link) == target:
            return
        link.unlink()
    elif link.exists():
        raise EnvironmentMissingError(
            f"{link} exists and is not a link to {modules}; remove it and run `{BUILD_COMMAND}`"
        )
    link.symlink_to(target, target_is_directory=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the environments asked for (default: all), skipping those that are up to date."""
    parser = argparse.ArgumentParser(prog=BUILD_COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="store_true", help="only the Python peer environments")
    parser.add_argument("--node", action="store_true", help="only the Node packages")
    parser.add_argument("--har", action="store_true", help="only the HAR validator and reader")
    args = parser.parse_args(argv)
    every = not args.python and not args.node and not args.har
    try:
        if args.python or every:
            for http in HTTP_IMPLEMENTATIONS:
                build_python(http)
            build_sdk1()
            build_sdk2024()
        if args.node or every:
            build_node()
        if args.har or every:
            build_har()
    except EnvironmentMissingError as exc:
        print(f"peers: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
