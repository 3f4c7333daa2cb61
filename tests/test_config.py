"""Tests for `proxy.config`: the example file, layering with sources, errors, and `--print-config`."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from proxy.addresses import parse_host_port
from proxy.config import ConfigError, Settings, flag_name
from proxy.config_load import LoadedSettings, load_settings
from proxy.config_print import render_settings

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.toml"
FIELDS = list(Settings.model_fields)
SETTING_LINE = re.compile(r"^(?:# )?([a-z][a-z0-9_]*) = ")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


def example_blocks() -> list[tuple[str, str, list[str]]]:
    """(setting, doc text, setting lines) for each blank-line separated block after the header."""
    blocks = EXAMPLE.read_text(encoding="utf-8").split("\n\n")[1:]
    parsed = []
    for block in blocks:
        lines = block.strip("\n").splitlines()
        start = next(i for i, line in enumerate(lines) if SETTING_LINE.match(line))
        key = SETTING_LINE.match(lines[start])
        assert key is not None
        doc = " ".join(line.removeprefix("#").strip() for line in lines[:start])
        parsed.append((key.group(1), doc, lines[start:]))
    return parsed


# --- the example file ------------------------------------------------------------------------------


def test_example_config_parses_and_loads_to_exactly_the_defaults() -> None:
    with EXAMPLE.open("rb") as handle:
        tomllib.load(handle)

    loaded = load_settings(config_path=EXAMPLE, env={})

    assert loaded.settings == Settings()
    in_file = {key for key, _doc, lines in example_blocks() if not lines[0].startswith("#")}
    assert {name for name, source in loaded.sources.items() if source == f"file:{EXAMPLE}"} == in_file


def test_example_config_mentions_every_setting_once_and_nothing_unknown() -> None:
    keys = [key for key, _doc, _lines in example_blocks()]

    assert sorted(keys) == sorted(FIELDS)
    assert len(keys) == len(set(keys))


def test_example_config_comments_each_setting_with_its_docstring() -> None:
    for key, doc, _lines in example_blocks():
        description = Settings.model_fields[key].description or ""
        assert doc == " ".join(description.split()), key


MOVES_WHEN_UNSET = {"admin"}
"""Settings the example leaves commented out although they have a default: set, they stop moving."""


def test_example_config_comments_out_only_settings_without_a_default_and_the_admin_address() -> None:
    defaults = Settings()
    for key, _doc, lines in example_blocks():
        commented = getattr(defaults, key) is None or key in MOVES_WHEN_UNSET
        assert lines[0].startswith("#") == commented, key


def test_the_example_leaves_admin_unset_so_a_copy_of_it_still_lets_a_taken_admin_port_move() -> None:
    loaded = load_settings(config_path=EXAMPLE, env={})

    assert loaded.sources["admin"] == "default"
    assert loaded.settings.admin == "127.0.0.1:9901"


def test_example_values_of_commented_out_settings_are_valid_when_uncommented(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    # upstream and upstream_cmd exclude each other: the command is checked alone
    command = next(line for line in text.splitlines() if line.startswith("# upstream_cmd = "))
    uncommented = "\n".join(
        line.removeprefix("# ") if SETTING_LINE.match(line) else line
        for line in text.splitlines()
        if line != command
    )

    loaded = load_settings(config_path=write(tmp_path, uncommented), env={})
    alone = load_settings(config_path=write(tmp_path, command.removeprefix("# ")), env={})

    assert alone.settings.upstream_cmd == "npx -y @modelcontextprotocol/server-everything"
    assert loaded.settings.upstream is not None
    assert loaded.settings.admin_token is not None
    assert loaded.settings.health == "127.0.0.1:9902"
    assert loaded.sources["admin"] == f"file:{tmp_path / 'c.toml'}"


def test_every_setting_has_a_docstring_description() -> None:
    for name, info in Settings.model_fields.items():
        assert info.description, name


# --- layering and sources --------------------------------------------------------------------------


def test_every_setting_comes_from_its_default_when_no_layer_sets_it() -> None:
    loaded = load_settings(env={})

    assert loaded.settings == Settings()
    assert loaded.sources == dict.fromkeys(FIELDS, "default")


def test_the_file_overrides_the_default(tmp_path: Path) -> None:
    path = write(tmp_path, 'listen = "127.0.0.1:1001"\n')

    loaded = load_settings(config_path=path, env={})

    assert loaded.settings.listen == "127.0.0.1:1001"
    assert loaded.sources["listen"] == f"file:{path}"
    assert loaded.sources["admin"] == "default"


def test_the_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'listen = "127.0.0.1:1001"\n')

    loaded = load_settings(config_path=path, env={"MCP_PROXY_LISTEN": "127.0.0.1:1002"})

    assert loaded.settings.listen == "127.0.0.1:1002"
    assert loaded.sources["listen"] == "env:MCP_PROXY_LISTEN"


def test_a_typed_flag_overrides_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, 'listen = "127.0.0.1:1001"\n')

    loaded = load_settings(
        config_path=path, env={"MCP_PROXY_LISTEN": "127.0.0.1:1002"}, flags={"listen": "127.0.0.1:1003"}
    )

    assert loaded.settings.listen == "127.0.0.1:1003"
    assert loaded.sources["listen"] == "flag:--listen"


def test_flag_sources_use_the_dashed_flag_spelling() -> None:
    loaded = load_settings(env={}, flags={"upstream_timeout": 2.5})

    assert (
        loaded.sources["upstream_timeout"]
        == "flag:--upstream-timeout"
        == "flag:" + flag_name("upstream_timeout")
    )


def test_a_flag_passed_as_none_counts_as_not_typed() -> None:
    loaded = load_settings(env={"MCP_PROXY_LISTEN": "127.0.0.1:1002"}, flags={"listen": None})

    assert loaded.settings.listen == "127.0.0.1:1002"
    assert loaded.sources["listen"] == "env:MCP_PROXY_LISTEN"


def test_the_config_file_can_be_named_by_mcp_proxy_config(tmp_path: Path) -> None:
    path = write(tmp_path, "max_rounds = 3\n")

    loaded = load_settings(env={"MCP_PROXY_CONFIG": str(path)})

    assert loaded.settings.max_rounds == 3
    assert loaded.sources["max_rounds"] == f"file:{path}"


def test_an_explicit_config_path_wins_over_mcp_proxy_config(tmp_path: Path) -> None:
    chosen = write(tmp_path, "max_rounds = 4\n")

    loaded = load_settings(config_path=chosen, env={"MCP_PROXY_CONFIG": str(tmp_path / "absent.toml")})

    assert loaded.settings.max_rounds == 4


def test_environment_lists_are_comma_separated_and_header_names_lowercased() -> None:
    loaded = load_settings(env={"MCP_PROXY_REDACT_HEADERS": "Authorization, X-Secret-Thing,,"})

    assert loaded.settings.redact_headers == ["authorization", "x-secret-thing"]


def test_an_environment_list_may_be_a_json_array_as_toml_writes_it() -> None:
    loaded = load_settings(
        env={"MCP_PROXY_REDACT_HEADERS": '["X-A", "x-b"]', "MCP_PROXY_FAULTS": '["tool:a => delay=5ms"]'}
    )

    assert loaded.settings.redact_headers == ["x-a", "x-b"]
    assert loaded.settings.faults == ["tool:a => delay=5ms"]


@pytest.mark.parametrize("text", ['["x-a","x-b"', "x-a; x-b", '"x-a"', "x a"])
def test_a_redaction_entry_no_header_could_match_is_refused_not_kept_unmatched(text: str) -> None:
    # a list pasted in another syntax must not leave the headers it meant in clear without a word
    with pytest.raises(ConfigError) as refused:
        load_settings(env={"MCP_PROXY_REDACT_HEADERS": text})

    assert "is not a header name" in str(refused.value)
    assert '(x-a,x-b) or as a JSON array (["x-a", "x-b"])' in str(refused.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("1", True), ("YES", True), ("false", False), ("0", False), ("no", False)],
)
def test_environment_booleans_accept_true_false_one_zero_yes_no(text: str, expected: bool) -> None:
    assert load_settings(env={"MCP_PROXY_TUI": text}).settings.tui is expected


def test_environment_numbers_and_paths_are_converted_to_their_field_types() -> None:
    loaded = load_settings(
        env={
            "MCP_PROXY_MAX_CHAINS": "7",
            "MCP_PROXY_UPSTREAM_TIMEOUT": "1.5",
            "MCP_PROXY_CAPTURE": "/tmp/cap.jsonl",
        }
    )

    assert loaded.settings.max_chains == 7
    assert loaded.settings.upstream_timeout == 1.5
    assert loaded.settings.capture == Path("/tmp/cap.jsonl")


def test_an_empty_environment_value_unsets_an_optional_setting(tmp_path: Path) -> None:
    path = write(tmp_path, 'upstream = "http://example.test/mcp"\n')

    loaded = load_settings(config_path=path, env={"MCP_PROXY_UPSTREAM": ""})

    assert loaded.settings.upstream is None
    assert loaded.sources["upstream"] == "env:MCP_PROXY_UPSTREAM"


def test_environment_variables_without_the_prefix_are_ignored() -> None:
    assert load_settings(env={"PATH": "/bin", "LISTEN": "nonsense"}).settings == Settings()


def test_choices_are_accepted_in_any_case() -> None:
    assert load_settings(env={"MCP_PROXY_LOG_LEVEL": "DEBUG"}).settings.log_level == "debug"


def test_settings_are_frozen_and_reject_unknown_fields() -> None:
    settings = Settings()

    with pytest.raises(ValidationError):
        settings.listen = "127.0.0.1:1"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Settings(listne="127.0.0.1:1")  # type: ignore[call-arg]


def test_an_admin_token_read_from_a_file_with_its_newline_is_the_token_a_client_can_send() -> None:
    loaded = load_settings(env={"MCP_PROXY_ADMIN_TOKEN": "s3cret-token\n"})

    assert loaded.settings.admin_token is not None
    assert loaded.settings.admin_token.get_secret_value() == "s3cret-token"


def test_a_check_across_settings_names_them_without_echoing_the_settings_and_their_secrets() -> None:
    env = {
        "MCP_PROXY_ADMIN_TOKEN": "s3cret-token",
        "MCP_PROXY_UPSTREAM": "http://127.0.0.1:9/mcp?api_key=K3Y",
    }
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env, flags={"max_body_bytes_in_flight": 100_000})

    assert "max_body_bytes_in_flight" in str(caught.value)
    assert "s3cret-token" not in str(caught.value)
    assert "K3Y" not in str(caught.value)


def test_only_a_variable_over_a_file_key_is_said_a_flag_typed_over_it_is_meant(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text("capture_keep = 20\nupstream_timeout = 45\n")

    loaded = load_settings(
        config_path=path, env={"MCP_PROXY_CAPTURE_KEEP": "5"}, flags={"upstream_timeout": 30.0}
    )

    assert loaded.overridden == {"capture_keep": f"file:{path}"}


def test_a_non_loopback_admin_api_is_allowed_with_a_token_or_when_disabled() -> None:
    with_token = load_settings(env={"MCP_PROXY_ADMIN": "0.0.0.0:9901", "MCP_PROXY_ADMIN_TOKEN": "t0k"})
    disabled = load_settings(env={"MCP_PROXY_ADMIN": "0.0.0.0:9901", "MCP_PROXY_ADMIN_ENABLED": "no"})

    assert with_token.settings.admin == disabled.settings.admin == "0.0.0.0:9901"


# --- errors ----------------------------------------------------------------------------------------


def test_a_bad_upstream_url_names_the_setting_and_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_UPSTREAM": "ftp://x"})

    assert caught.value.setting == "upstream"
    assert str(caught.value) == "upstream (env MCP_PROXY_UPSTREAM): not an http(s) URL: 'ftp://x'"


@pytest.mark.parametrize("url", ["ftp://x", "http://", "example.test/mcp", "http://host:99999/mcp", "mcp"])
def test_an_upstream_that_is_not_an_http_url_with_a_host_is_rejected(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, flags={"upstream": url})

    assert caught.value.setting == "upstream"
    assert str(caught.value).startswith("upstream (flag --upstream): ")


def test_a_bound_on_bodies_in_flight_below_one_body_is_refused_naming_it_and_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_MAX_BODY_BYTES_IN_FLIGHT": "1048576"})

    assert caught.value.setting == "max_body_bytes_in_flight"
    assert "MCP_PROXY_MAX_BODY_BYTES_IN_FLIGHT" in str(caught.value)
    assert "below max_body_bytes (8388608)" in str(caught.value)


def test_a_bad_listen_address_names_the_setting_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'listen = "localhost"\n')

    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == "listen"
    assert str(caught.value).startswith(f"listen (file {path}): expected HOST:PORT")


def test_an_unknown_key_in_the_file_is_an_error_naming_key_and_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'listne = "127.0.0.1:1"\n')

    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == "listne"
    assert str(caught.value) == f"unknown setting 'listne' in {path} (did you mean 'listen'?)"


def test_a_table_in_the_file_is_an_unknown_setting(tmp_path: Path) -> None:
    path = write(tmp_path, '[logging]\nlevel = "info"\n')

    with pytest.raises(ConfigError, match="unknown setting 'logging'"):
        load_settings(config_path=path, env={})


def test_an_unknown_mcp_proxy_variable_is_an_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_LISTNE": "127.0.0.1:1"})

    assert caught.value.setting == "listne"
    assert (
        str(caught.value) == "unknown environment variable MCP_PROXY_LISTNE (did you mean MCP_PROXY_LISTEN?)"
    )


@pytest.mark.parametrize(
    ("var", "meant"),
    [
        ("MCP_PROXY_UPSTREAM_URL", "MCP_PROXY_UPSTREAM"),
        ("MCP_PROXY_UPSTREAM_TIMEOUT_SECONDS", "MCP_PROXY_UPSTREAM_TIMEOUT"),
    ],
)
def test_a_variable_that_adds_a_word_to_a_setting_is_pointed_at_that_setting(var: str, meant: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={var: "x"})

    assert str(caught.value) == f"unknown environment variable {var} (did you mean {meant}?)"


def test_the_variables_kubernetes_sets_for_a_service_named_mcp_proxy_are_not_taken_for_settings() -> None:
    links = {
        "MCP_PROXY_SERVICE_HOST": "10.96.0.12",
        "MCP_PROXY_SERVICE_PORT": "8080",
        "MCP_PROXY_SERVICE_PORT_MCP": "8080",
        "MCP_PROXY_PORT": "tcp://10.96.0.12:8080",
        "MCP_PROXY_PORT_8080_TCP": "tcp://10.96.0.12:8080",
        "MCP_PROXY_PORT_8080_TCP_PROTO": "tcp",
        "MCP_PROXY_PORT_8080_TCP_PORT": "8080",
        "MCP_PROXY_PORT_8080_TCP_ADDR": "10.96.0.12",
        "MCP_PROXY_ADMIN_SERVICE_HOST": "10.96.0.13",  # a Service named mcp-proxy-admin
        "MCP_PROXY_ADMIN_PORT_9901_TCP": "tcp://10.96.0.13:9901",
    }
    loaded = load_settings(env={**links, "MCP_PROXY_LISTEN": "127.0.0.1:8181"})

    assert loaded.settings.listen == "127.0.0.1:8181"
    with pytest.raises(ConfigError, match="unknown environment variable MCP_PROXY_PORTS"):
        load_settings(env={"MCP_PROXY_PORTS": "8080"})  # no link's shape: a misspelt setting still is


def test_a_service_link_of_an_ipv6_cluster_is_passed_over_too() -> None:
    links = {
        "MCP_PROXY_SERVICE_HOST": "fd00:10:96::c",
        "MCP_PROXY_PORT": "tcp://[fd00:10:96::c]:8080",
        "MCP_PROXY_PORT_8080_TCP_ADDR": "fd00:10:96::c",
    }
    assert load_settings(env=links).settings.listen == "127.0.0.1:8080"


@pytest.mark.parametrize(
    ("var", "value", "meant"),
    [
        ("MCP_PROXY_PORT", "9000", "MCP_PROXY_LISTEN"),
        ("MCP_PROXY_LISTEN_PORT", "9000", "MCP_PROXY_LISTEN"),
        ("MCP_PROXY_ADMIN_PORT", "9001", "MCP_PROXY_ADMIN"),
        ("MCP_PROXY_HEALTH_PORT", "9002", "MCP_PROXY_HEALTH"),
    ],
)
def test_a_port_variable_that_is_no_kubernetes_link_is_refused_naming_the_setting_that_holds_the_port(
    var: str, value: str, meant: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={var: value})

    assert str(caught.value) == (
        f"unknown environment variable {var}: a port is set with its host, as {meant}=HOST:PORT (a "
        "variable of this name is passed over only as the tcp://IP:PORT link Kubernetes sets for a Service)"
    )


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("MCP_PROXY_PORT", "tcp://proxy.example:8080"),  # the kubelet writes the cluster IP
        ("MCP_PROXY_PORT", "tcp://10.96.0.12:8080/mcp"),
        ("MCP_PROXY_SERVICE_PORT", "http"),
        ("MCP_PROXY_SERVICE_HOST", "0.0.0.0:8080"),
        ("MCP_PROXY_PORT_8080_TCP_PROTO", "http"),
        ("MCP_PROXY_PORT_8080_TCP_ADDR", "localhost"),
        ("MCP_PROXY_UPSTREAM_PORT", "8000"),
    ],
)
def test_a_link_name_whose_value_has_no_links_shape_is_refused_by_name(var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^unknown environment variable {var}\\b"):
        load_settings(env={var: value})


@pytest.mark.parametrize(
    ("line", "setting"),
    [("capture_max_bytes = true", "capture_max_bytes"), ("drain_grace = false", "drain_grace")],
)
def test_a_toml_boolean_for_a_number_is_refused_not_read_as_one_or_zero(
    tmp_path: Path, line: str, setting: str
) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == setting
    assert str(caught.value) == f"{setting} (file {path}): a number is expected, got {line.split()[-1]}"


def test_an_unknown_flag_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, flags={"listne": "127.0.0.1:1"})

    assert caught.value.setting == "listne"


def test_an_unreadable_config_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"

    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == "config"
    assert str(caught.value) == f"cannot read config file {path}: No such file or directory"


def test_invalid_toml_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "listen = \n")

    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == "config"
    assert str(caught.value).startswith(f"invalid TOML in {path}: ")


def test_a_config_file_that_is_not_utf8_is_invalid_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b'listen = "\xff"\n')

    with pytest.raises(ConfigError, match="invalid TOML in"):
        load_settings(config_path=path, env={})


@pytest.mark.parametrize(
    "name",
    [
        "capture_keep",
        "capture_body_limit",
        "max_body_bytes",
        "max_chains",
        "max_messages_per_chain",
        "bus_queue_size",
        "max_rounds",
        "max_continuations",
        "max_continuations_per_principal",
        "upstream_connect_timeout",
        "upstream_timeout",
        "continuation_ttl",
    ],
)
def test_a_bound_or_timeout_that_is_not_positive_names_the_setting(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, f"{name} = 0\n")

    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == name
    assert str(caught.value) == f"{name} (file {path}): input should be greater than 0, got 0"


@pytest.mark.parametrize("name", ["capture_max_bytes", "drain_grace"])
def test_settings_where_zero_means_never_accept_zero_but_not_less(name: str) -> None:
    assert getattr(load_settings(env={}, flags={name: 0}).settings, name) == 0

    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, flags={name: -1})

    assert caught.value.setting == name


def test_a_non_numeric_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_MAX_CHAINS": "lots"})

    assert caught.value.setting == "max_chains"
    assert str(caught.value).startswith(
        "max_chains (env MCP_PROXY_MAX_CHAINS): input should be a valid integer"
    )


def test_a_bad_boolean_in_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_TUI": "maybe"})

    assert caught.value.setting == "tui"
    assert str(caught.value) == (
        "tui (env MCP_PROXY_TUI): not a boolean (use true/false/1/0/yes/no): 'maybe'"
    )


def test_a_choice_outside_its_literals_names_the_setting() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, flags={"bridge": "sometimes"})

    assert caught.value.setting == "bridge"
    assert "'sometimes'" in str(caught.value)


def test_an_empty_redaction_pattern_is_rejected_because_it_would_match_every_header(tmp_path: Path) -> None:
    path = write(tmp_path, 'redact_header_patterns = ["token", " "]\n')

    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == "redact_header_patterns"


def test_health_takes_a_host_port_and_an_empty_variable_leaves_it_unset() -> None:
    assert load_settings(env={"MCP_PROXY_HEALTH": "[::1]:9902"}).settings.health == "[::1]:9902"
    assert load_settings(env={"MCP_PROXY_HEALTH": ""}).settings.health is None
    assert Settings().health is None


def test_a_health_listener_beyond_loopback_needs_no_token_because_it_shows_status_only() -> None:
    loaded = load_settings(env={"MCP_PROXY_HEALTH": "0.0.0.0:9902", "MCP_PROXY_ADMIN_ENABLED": "false"})

    assert loaded.settings.health == "0.0.0.0:9902"
    assert loaded.settings.admin_token is None


def test_a_health_address_without_a_port_names_health_and_its_source() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_HEALTH": "0.0.0.0"})

    assert caught.value.setting == "health"
    assert str(caught.value).startswith("health (env MCP_PROXY_HEALTH): ")
    assert "HOST:PORT" in str(caught.value)


def test_a_non_loopback_admin_api_without_a_token_names_admin_and_its_source() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_ADMIN": "0.0.0.0:9901"})

    assert caught.value.setting == "admin"
    assert str(caught.value).startswith("admin (env MCP_PROXY_ADMIN): ")
    assert "--admin-token or MCP_PROXY_ADMIN_TOKEN" in str(caught.value)


def test_a_malformed_secret_is_never_echoed_in_the_error(tmp_path: Path) -> None:
    path = write(tmp_path, "state_key = 123456789\n")

    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == "state_key"
    assert "123456789" not in str(caught.value)


# --- host:port -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("localhost:0", ("localhost", 0)),
        ("0.0.0.0:9901", ("0.0.0.0", 9901)),
        ("[::1]:8080", ("::1", 8080)),
        ("[::]:65535", ("::", 65535)),
        ("proxy_sidecar.internal:80", ("proxy_sidecar.internal", 80)),
    ],
)
def test_parse_host_port_splits_host_and_port_and_unbrackets_ipv6(
    text: str, expected: tuple[str, int]
) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize(
    "text", ["8080", ":8080", "::1:8080", "[::1]8080", "[nope]:80", "host:", "host:65536", "host:-1", "a b:1"]
)
def test_parse_host_port_rejects_what_is_not_host_colon_port(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        parse_host_port(text)


# --- --print-config --------------------------------------------------------------------------------


def test_render_settings_prints_one_line_per_setting_with_its_source(tmp_path: Path) -> None:
    path = write(tmp_path, "max_chains = 42\n")
    loaded = load_settings(
        config_path=path, env={"MCP_PROXY_LOG_LEVEL": "debug"}, flags={"upstream": "http://u.test/mcp"}
    )

    lines = render_settings(loaded).splitlines()

    assert [line.split(" = ")[0] for line in lines] == FIELDS
    assert "max_chains = 42" in lines[FIELDS.index("max_chains")]
    assert lines[FIELDS.index("max_chains")].endswith(f"# file:{path}")
    assert lines[FIELDS.index("log_level")].startswith('log_level = "debug"')
    assert lines[FIELDS.index("log_level")].endswith("# env:MCP_PROXY_LOG_LEVEL")
    assert lines[FIELDS.index("upstream")].startswith('upstream = "http://u.test/mcp"')
    assert lines[FIELDS.index("upstream")].endswith("# flag:--upstream")
    assert lines[FIELDS.index("tui")].startswith("tui = false")


def test_render_settings_masks_the_upstream_urls_query_values() -> None:
    loaded = load_settings(env={}, flags={"upstream": "http://u.test/mcp?api_key=k-123&x=1"})

    line = render_settings(loaded).splitlines()[FIELDS.index("upstream")]

    assert line.startswith('upstream = "http://u.test/mcp?api_key=<redacted>&x=<redacted>"')


@pytest.mark.parametrize("userinfo", ["bot:s3cret-pass@", "ghp-t0ken-user@", "bot:@"])
def test_an_upstream_url_with_credentials_is_refused_without_echoing_them(userinfo: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_UPSTREAM": f"http://{userinfo}u.test/mcp?api_key=k-123"})

    message = str(caught.value)
    assert caught.value.setting == "upstream"
    assert "MCP_PROXY_UPSTREAM" in message
    assert "credentials" in message
    assert "Authorization" in message
    for secret in ("s3cret-pass", "ghp-t0ken-user", "bot", "k-123"):
        assert secret not in message


def test_an_otlp_endpoint_with_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, flags={"otlp_endpoint": "http://otel:s3cret-pass@c.test:4318"})

    message = str(caught.value)
    assert caught.value.setting == "otlp_endpoint"
    assert "carries credentials" in message
    assert "OTEL_EXPORTER_OTLP_HEADERS" in message
    assert "s3cret-pass" not in message


@pytest.mark.parametrize("where", ["flag", "env"])
@pytest.mark.parametrize("setting", ["admin_token", "redact_key", "state_key"])
def test_an_empty_secret_is_refused_like_a_missing_one_naming_the_setting(where: str, setting: str) -> None:
    flags: dict[str, object] = {setting: SecretStr("  ")} if where == "flag" else {}
    env = {f"MCP_PROXY_{setting.upper()}": ""} if where == "env" else {}
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env, flags=flags)

    assert caught.value.setting == setting
    assert "is empty" in str(caught.value)


def test_user_redaction_lists_add_to_the_built_in_ones_and_only_unredact_drops_one() -> None:
    loaded = load_settings(
        env={"MCP_PROXY_REDACT_HEADERS": "x-tenant", "MCP_PROXY_UNREDACT_HEADERS": "mcp-session-id,session"}
    )
    assert loaded.settings.redact_headers == ["x-tenant"]
    assert loaded.settings.unredact_headers == ["mcp-session-id", "session"]
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MCP_PROXY_UNREDACT_HEADERS": "x-tenant"})
    assert caught.value.setting == "unredact_headers"
    assert "not a built-in redaction entry" in str(caught.value)


def test_render_settings_aligns_the_source_comments_except_after_overlong_values() -> None:
    many = "x-tenant-one,x-tenant-two,x-tenant-three,x-tenant-four"
    lines = render_settings(load_settings(env={"MCP_PROXY_REDACT_HEADERS": many})).splitlines()

    setting_parts = [line.rsplit("    # ", 1)[0].rstrip() for line in lines]
    columns = {
        line.index("    # ") for line, part in zip(lines, setting_parts, strict=True) if len(part) <= 60
    }

    assert len(columns) == 1
    overlong = [(line, part) for line, part in zip(lines, setting_parts, strict=True) if len(part) > 60]
    assert [line for line, part in overlong] == [
        f"{part}    # env:MCP_PROXY_REDACT_HEADERS" for line, part in overlong
    ]
    assert overlong, "a long redaction list exercises the cap"


def test_render_settings_never_prints_a_secret_value() -> None:
    loaded = load_settings(
        env={"MCP_PROXY_STATE_KEY": "hunter2-state-key"}, flags={"admin_token": SecretStr("hunter2-admin")}
    )

    text = render_settings(loaded)

    assert "hunter2" not in text
    lines = text.splitlines()
    assert lines[FIELDS.index("state_key")].startswith('state_key = "<set>"')
    assert lines[FIELDS.index("state_key")].endswith("# env:MCP_PROXY_STATE_KEY")
    assert lines[FIELDS.index("admin_token")].startswith('admin_token = "<set>"')
    assert loaded.settings.admin_token is not None
    assert loaded.settings.admin_token.get_secret_value() == "hunter2-admin"


def otlp_comment(settings: LoadedSettings, environ: dict[str, str]) -> str:
    line = render_settings(settings, environ).splitlines()[FIELDS.index("otlp_endpoint")]
    return line.split("#", 1)[1].strip()


def test_render_settings_names_the_standard_variable_that_wins_when_both_name_a_collector() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/v1/traces",
    }
    comment = otlp_comment(load_settings(env={}), environ)

    assert comment == "default; tracing on: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://traces:4318/v1/traces"


def test_render_settings_says_otel_sdk_disabled_turns_a_set_otlp_endpoint_off() -> None:
    loaded = load_settings(env={}, flags={"otlp_endpoint": "http://c:4318"})

    assert otlp_comment(loaded, {"OTEL_SDK_DISABLED": "true"}) == (
        "flag:--otlp-endpoint; tracing off: OTEL_SDK_DISABLED=true"
    )
    assert otlp_comment(loaded, {}) == "flag:--otlp-endpoint"
    assert otlp_comment(load_settings(env={}), {"OTEL_SDK_DISABLED": "true"}) == "default"


def test_render_settings_shows_unset_optional_settings_as_unset() -> None:
    lines = render_settings(load_settings(env={})).splitlines()

    assert lines[FIELDS.index("state_key")].startswith("state_key = unset")
    assert lines[FIELDS.index("upstream")].startswith("upstream = unset")


def test_render_settings_of_hand_built_settings_calls_missing_sources_default() -> None:
    text = render_settings(LoadedSettings(settings=Settings(), sources={}))

    # a note may follow the source (`; in force: ...` for an unset per-client share)
    assert all(line.rsplit("    # ", 1)[1].split(";")[0] == "default" for line in text.splitlines())


def test_print_config_says_what_an_unset_per_client_share_comes_to() -> None:
    text = render_settings(LoadedSettings(settings=Settings(max_client_connections=100), sources={}))

    assert "# default; in force: 25, a quarter of max_client_connections" in text
    assert "# default; in force: 250, a quarter of max_sse_sessions" in text


# --- hygiene ---------------------------------------------------------------------------------------


def test_importing_config_loads_no_aiohttp_structlog_or_textual() -> None:
    code = (
        "import sys, proxy, proxy.config; "
        "print(proxy.__file__); "
        "print(sorted(m for m in ('aiohttp', 'structlog', 'textual') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        cwd=EXAMPLE.parent,
    )

    proxy_file, loaded = result.stdout.splitlines()
    assert Path(proxy_file).resolve().parent == EXAMPLE.parent / "proxy"
    assert loaded == "[]"


def test_one_address_cannot_park_calls_on_every_upstream_session_by_default() -> None:
    # Each parked call of a new principal keeps one upstream session busy: the per-address bound must
    # leave most sessions to other clients, or one client inventing principals blocks everyone.
    defaults = Settings(upstream="http://127.0.0.1:9/mcp")
    assert defaults.max_continuations_per_client * 4 <= defaults.max_upstream_sessions


def test_an_upstream_url_and_an_upstream_command_together_are_refused_without_echoing_either() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, flags={"upstream": "http://h/mcp?key=s3cret", "upstream_cmd": "srv --x"})
    assert "upstream and upstream_cmd are both set" in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_a_transport_for_an_upstream_command_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, flags={"upstream_cmd": "srv --token s3cret", "upstream_transport": "sse"})
    assert str(caught.value) == (
        "upstream_transport (flag --upstream-transport): upstream_transport names how an upstream URL is "
        "spoken to; a stdio command (--upstream-cmd) is always spoken to over stdio: drop upstream_transport"
    )
    assert load_settings(env={}, flags={"upstream_cmd": "srv --x"}).settings.upstream_transport == "auto"


def test_a_body_key_with_no_letter_or_digit_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(env={"MCP_PROXY_REDACT_BODY_KEYS": "api_token,--"})

    assert "'--' has no letter or digit, so no key would match it" in str(refused.value)


@pytest.mark.parametrize(
    ("line", "kind"),
    [("admin_enabled = 0", "a number"), ('tui = "yes"', "a string"), ("admin_enabled = [false]", "an array")],
)
def test_a_toml_switch_takes_only_true_or_false_and_the_error_names_the_type_not_the_value(
    tmp_path: Path, line: str, kind: str
) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text(line + "\n")
    setting = line.split()[0]
    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path, env={})

    assert caught.value.setting == setting
    assert str(caught.value) == f"{setting} (file {path}): true or false is expected, got {kind}"
