"""The layers that fill `Settings`: defaults < a flat TOML file < `MCP_PROXY_*` variables < the flags the
user typed, each value remembered with its source; every failure a `ConfigError` naming the setting
and the file, variable or flag it came from (and, for a misspelt name, the one likely meant).
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, get_args, get_origin

from pydantic import SecretStr, ValidationError
from pydantic_core import ErrorDetails

from proxy.config import CONFIG_ENV, ENV_PREFIX, RULE_LISTS, ConfigError, Settings, flag_name
from proxy.service_links import is_service_link

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


@dataclass(frozen=True)
class LoadedSettings:
    """Validated settings plus where each value came from ("default", "file:…", "env:…", "flag:…")."""

    settings: Settings
    sources: dict[str, str]
    overridden: dict[str, str] = field(default_factory=dict)
    """Keys of the TOML file that a variable overrode, with the file's source: a file key that has no
    effect (an image's `ENV` beats a mounted file) is said at start; a flag typed over it is meant."""


_FIELDS = Settings.model_fields
_SECRETS = frozenset(name for name, info in _FIELDS.items() if SecretStr in get_args(info.annotation))
SECRET_ENV_VARS: Final = frozenset(ENV_PREFIX + name.upper() for name in _SECRETS)
"""The environment variables that hold the proxy's own secrets (`MCP_PROXY_ADMIN_TOKEN`, ...): a
process the proxy starts (a stdio server) is not given them."""


ADDED_UP: Final = frozenset({"redact_headers", "redact_header_patterns", "redact_body_keys"})
"""Lists every source adds to rather than replaces: a flag or variable that names one more secret
never unmasks what the config file named."""


def _is_list(name: str) -> bool:
    return get_origin(_FIELDS[name].annotation) is list


def _hint(name: str, prefix: str = "") -> str:
    """The setting `name` likely meant: one it extends with a word (`upstream_url` meant `upstream`,
    not the similar-looking `upstream_era`), else the closest spelling."""
    extended = [field for field in _FIELDS if name.startswith(field + "_")]
    close = [max(extended, key=len)] if extended else difflib.get_close_matches(name, list(_FIELDS), n=1)
    return f" (did you mean {prefix}{close[0].upper() if prefix else repr(close[0])}?)" if close else ""


_HOST_PORT_FIELDS: Final = ("listen", "admin", "health")
"""Settings that hold a port, always with its host (`HOST:PORT`)."""


def _env_hint(name: str) -> str:
    """What an unknown variable likely meant; for a guessed `*_PORT`, the setting that holds the port."""
    if not name.endswith("port"):
        return _hint(name, ENV_PREFIX)
    owner = name.removesuffix("port").removesuffix("_") or "listen"
    if owner not in _HOST_PORT_FIELDS:
        return _hint(name, ENV_PREFIX)
    return (
        f": a port is set with its host, as {ENV_PREFIX}{owner.upper()}=HOST:PORT (a variable of this "
        "name is passed over only as the tcp://IP:PORT link Kubernetes sets for a Service)"
    )


def _split_list(text: str, separator: str = ",") -> object:
    """A list variable's items: a JSON array as TOML would write it (`["x-a", "x-b"]`), else the text
    split on `separator`. An array that is not valid JSON is handed on whole, for validation to refuse
    by name rather than split into items nobody meant."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            value = json.loads(stripped)
        except ValueError:
            return [stripped]
        return value if isinstance(value, list) else [stripped]
    return [item.strip() for item in text.split(separator) if item.strip()]


def _flag_items(given: object) -> list[object]:
    """One typed list flag's items (`--redact-headers x-a,x-b`)."""
    if not isinstance(given, str):
        return [given]
    items = _split_list(given)
    return items if isinstance(items, list) else [items]


def _read_file(path: Path, named_by: str = "") -> dict[str, tuple[object, str]]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(
            "config", f"cannot read config file {path}{named_by}: {exc.strerror or exc}"
        ) from None
    except ValueError as exc:  # TOMLDecodeError, or bytes that are not UTF-8
        raise ConfigError("config", f"invalid TOML in {path}: {exc}") from None
    for key, value in data.items():
        if key not in _FIELDS:
            raise ConfigError(key, f"unknown setting {key!r} in {path}{_hint(key)}")
        if isinstance(value, bool) and _takes_a_number(key):  # validation would read true as 1
            raise ConfigError(key, f"{key} (file {path}): a number is expected, got {str(value).lower()}")
        if _FIELDS[key].annotation is bool and not isinstance(value, bool):  # 1, "yes": read as true
            kind = _TOML_KINDS.get(type(value), "a value of another type")
            raise ConfigError(key, f"{key} (file {path}): true or false is expected, got {kind}")
    return {key: (value, f"file:{path}") for key, value in data.items()}


_TOML_KINDS: Final = {int: "a number", float: "a number", str: "a string", list: "an array", dict: "a table"}
"""What a TOML value is, named in an error without echoing the value (it may be a misplaced secret)."""


def _takes_a_number(name: str) -> bool:
    """Whether a setting is a number (and not also a switch): TOML's `true` there is a slip."""
    annotation = _FIELDS[name].annotation
    kinds = set(get_args(annotation)) or {annotation}
    return bool(kinds & {int, float}) and bool not in kinds


def _parse_env(name: str, var: str, text: str) -> object:
    annotation = _FIELDS[name].annotation
    if text.strip() == "" and type(None) in get_args(annotation) and name not in _SECRETS:
        return None  # an empty secret is kept, so validation refuses it instead of unsetting it
    if annotation is bool:
        word = text.strip().lower()
        if word not in _TRUE | _FALSE:
            raise ConfigError(
                name, f"{name} (env {var}): not a boolean (use true/false/1/0/yes/no): {text!r}"
            )
        return word in _TRUE
    if name in RULE_LISTS:  # a rule may hold commas (an error's message): rules are split on `;`
        return _split_list(text, ";")
    return _split_list(text) if _is_list(name) else text


def _read_env(env: Mapping[str, str]) -> dict[str, tuple[object, str]]:
    layer: dict[str, tuple[object, str]] = {}
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var == CONFIG_ENV:
            continue
        name = var.removeprefix(ENV_PREFIX).lower()
        if name not in _FIELDS:
            if is_service_link(var, env[var]):
                continue
            raise ConfigError(name, f"unknown environment variable {var}{_env_hint(name)}")
        layer[name] = (_parse_env(name, var, env[var]), f"env:{var}")
    return layer


def _read_flags(flags: Mapping[str, object]) -> dict[str, tuple[object, str]]:
    layer: dict[str, tuple[object, str]] = {}
    for name, value in flags.items():
        if value is None:  # a flag left at its argparse default was not typed
            continue
        if name not in _FIELDS:
            raise ConfigError(name, f"unknown setting {name!r} given as a flag")
        if _is_list(name) and isinstance(value, str):
            value = [value] if name in RULE_LISTS else _split_list(value)
        elif _is_list(name) and isinstance(value, list) and name not in RULE_LISTS:  # a repeated flag
            value = [item for given in value for item in _flag_items(given)]
        layer[name] = (value, f"flag:{flag_name(name)}")
    return layer


def _from_validation(exc: ValidationError, sources: Mapping[str, str]) -> ConfigError:
    """Every setting that failed, each named with where its value came from (`; ` between them), so
    one run shows all there is to fix."""
    errors = exc.errors(include_url=False)
    said = [_said(error, sources) for error in errors]
    return ConfigError(said[0][0], "; ".join(dict.fromkeys(text for _, text in said)))


def _said(error: ErrorDetails, sources: Mapping[str, str]) -> tuple[str, str]:
    """One validation error: the setting it concerns, and `setting (where): what is wrong`."""
    ctx = error.get("ctx") or {}
    setting = str(error["loc"][0]) if error["loc"] else str(ctx.get("setting", "settings"))
    where = sources.get(setting, "default").replace(":", " ", 1)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] not in ("value_error", "admin_exposed", "two_upstreams", "transport_of_a_command"):
        message = message[:1].lower() + message[1:]
        # Never echo a secret, even a malformed one, nor the input of a check across settings (the
        # whole settings, secrets and all): only one setting's own value.
        if setting not in _SECRETS and error["loc"]:
            message += f", got {error['input']!r}"
    return setting, f"{setting} ({where}): {message}"


def load_settings(
    *,
    config_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
) -> LoadedSettings:
    """Layer defaults < TOML file < `MCP_PROXY_*` env < typed flags, validate, and record each source."""
    environ = os.environ if env is None else env
    named_by = ""
    if config_path is None and environ.get(CONFIG_ENV):
        config_path, named_by = Path(environ[CONFIG_ENV]), f" (named by {CONFIG_ENV})"
    layers = [
        _read_file(config_path, named_by) if config_path is not None else {},
        _read_env(environ),
        _read_flags(flags or {}),
    ]
    values: dict[str, object] = {}
    sources = dict.fromkeys(_FIELDS, "default")
    overridden: dict[str, str] = {}
    for layer in layers:
        for name, (value, source) in layer.items():
            earlier = values.get(name)
            if name in ADDED_UP and isinstance(earlier, list) and isinstance(value, list):
                values[name] = [*earlier, *(item for item in value if item not in earlier)]
                sources[name] = f"{sources[name]} + {source}"
                continue
            if sources[name].startswith("file:") and source.startswith("env:"):  # a flag is meant
                overridden[name] = sources[name]
            values[name] = value
            sources[name] = source
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        raise _from_validation(exc, sources) from None
    return LoadedSettings(settings=settings, sources=sources, overridden=overridden)
