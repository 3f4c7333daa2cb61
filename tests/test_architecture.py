"""Import hygiene: the pure rooms load no I/O or UI library, and the import-linter contracts hold."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "proxy"
HEAVY = ("aiohttp", "structlog", "textual", "ui")


def pure_modules() -> list[str]:
    """Every module of the pure rooms, found on disk so a new module is covered without editing this."""
    modules = ["proxy.config", "proxy.config_load", "proxy.config_print", "proxy.addresses"]
    for room in ("wire", "framing", "engine", "flows", "record"):
        for path in sorted((PACKAGE / room).glob("*.py")):
            stem = path.stem
            modules.append(f"proxy.{room}" if stem == "__init__" else f"proxy.{room}.{stem}")
    return modules


def test_the_pure_rooms_are_found_on_disk() -> None:
    modules = pure_modules()

    assert {"proxy.wire.jsonrpc", "proxy.framing.classify", "proxy.engine.passthrough"} <= set(modules)
    assert {"proxy.flows.chains", "proxy.record.capture", "proxy.config"} <= set(modules)


def test_importing_the_pure_rooms_loads_no_aiohttp_structlog_or_textual(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import importlib, json, sys
        for name in {pure_modules()!r}:
            importlib.import_module(name)
        import proxy
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        print(json.dumps({{"file": proxy.__file__, "loaded": loaded}}))
        """
    )

    # Run outside the repo, so `proxy` resolves the way an installed project does, not via the cwd.
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["loaded"] == []
    assert Path(report["file"]).resolve() == PACKAGE / "__init__.py"


def test_the_probe_would_see_a_heavy_import() -> None:
    """The subprocess check is only worth something if it notices a room that does load aiohttp."""
    script = "import sys, proxy.transport.admin; print('aiohttp' in sys.modules)"

    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_the_import_linter_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    if not lint_imports.exists():
        pytest.fail(f"lint-imports not installed next to {sys.executable} (pip install import-linter)")

    done = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
