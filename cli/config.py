"""The config file: named profiles of settings the command line otherwise takes as flags.

``~/.config/statekit/config.toml`` (``$XDG_CONFIG_HOME/statekit/config.toml``; another file
with ``STATEKIT_CONFIG``)::

    default_profile = "minio"            # else STATEKIT_PROFILE or --profile; else [profiles.default]

    [profiles.minio]
    savepoint_dir = "s3://bucket/savepoints"    # savepoint / stop / cancel --with-savepoint without a DIR
    storage_options = { anon = false, client_kwargs = { endpoint_url = "http://127.0.0.1:9000" } }
    spark = { remote = "sc://spark.internal:15002", conf = { "spark.sql.shuffle.partitions" = "64" } }
    output = { plain = true }                   # or json = true

    [profiles.laptop]
    spark.master = "local[4]"

Each setting comes from the first of: the command's flag, its environment variable, the
profile, statekit's default (``statekit config show`` prints every value and where it came
from). Environment variables: ``STATEKIT_STORAGE_OPTIONS`` (JSON object, merged key by key
over the profile's), ``STATEKIT_SPARK_MASTER``, ``STATEKIT_SPARK_REMOTE``,
``STATEKIT_SAVEPOINT_DIR``, ``STATEKIT_OUTPUT`` (``json``; ``plain``: tables without borders;
``rich``: with borders, also in a pipe).

A file that does not parse, an unknown key, a value of the wrong type or a profile that is not
in the file is bad input (exit 2) naming the file, the profile and the key. No file: nothing
is configured. The file is read once per process, on first use (``tomllib``; ``tomli`` on
Python 3.10).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.json_contract import JsonShape

__all__ = [
    "CONFIG_ENV", "PROFILE_ENV", "SPARK_MASTER_ENV", "SPARK_REMOTE_ENV", "SAVEPOINT_DIR_ENV", "OUTPUT_ENV",
    "Profile", "ConfigFile", "Setting", "ConfigReport", "config_path", "load_config", "active_profile",
    "resolve", "config_report", "use_profile",
]

CONFIG_ENV = "STATEKIT_CONFIG"
PROFILE_ENV = "STATEKIT_PROFILE"
SPARK_MASTER_ENV = "STATEKIT_SPARK_MASTER"
SPARK_REMOTE_ENV = "STATEKIT_SPARK_REMOTE"
SAVEPOINT_DIR_ENV = "STATEKIT_SAVEPOINT_DIR"
OUTPUT_ENV = "STATEKIT_OUTPUT"
OUTPUT_STYLES = ("json", "plain", "rich")

# setting -> its environment variable (storage options: STATEKIT_STORAGE_OPTIONS, merged by key)
ENV_OF = {"spark.master": SPARK_MASTER_ENV, "spark.remote": SPARK_REMOTE_ENV, "savepoint_dir": SAVEPOINT_DIR_ENV,
          "output": OUTPUT_ENV, "storage_options": "STATEKIT_STORAGE_OPTIONS"}


# statekit's own value of a setting nothing configures, and what it means
DEFAULTS: dict[str, tuple[Any, str | None]] = {
    "spark.master": (None, "local[*], or the server of `statekit spark start` while it runs"),
    "spark.remote": (None, None),
    "spark.conf": (None, None),
    "savepoint_dir": (None, "the job's checkpoint directory (savepoints/ beside its checkpoints)"),
    "output": (None, "rich tables on a terminal, plain when piped"),
}


@dataclass(frozen=True)
class Profile:
    """One profile's settings (``None``: not set by the profile)."""

    name: str
    storage_options: Mapping[str, Any] | None = None
    spark_master: str | None = None
    spark_remote: str | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    savepoint_dir: str | None = None
    output: str | None = None  # json | plain | rich

    def get(self, key: str) -> Any:
        """The value of setting ``key`` (``spark.master``, ``output``, ...), ``None`` when unset."""
        return {"storage_options": self.storage_options, "spark.master": self.spark_master,
                "spark.remote": self.spark_remote, "spark.conf": dict(self.spark_conf) or None,
                "savepoint_dir": self.savepoint_dir, "output": self.output}[key]


@dataclass(frozen=True)
class ConfigFile:
    """The parsed config file (``exists`` False: no file, no profiles)."""

    path: str
    exists: bool
    default_profile: str | None = None
    profiles: Mapping[str, Profile] = field(default_factory=dict)


def config_path(environ: Mapping[str, str] | None = None) -> str:
    """``$STATEKIT_CONFIG``, else ``$XDG_CONFIG_HOME/statekit/config.toml`` (``~/.config``)."""
    env = os.environ if environ is None else environ
    if env.get(CONFIG_ENV):
        return os.path.expanduser(env[CONFIG_ENV])
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "statekit", "config.toml")


def load_config(path: str | None = None) -> ConfigFile:
    """The config file at ``path`` (default :func:`config_path`), read once per process.

    Raises:
        BadInputError: It does not parse, or holds an unknown key or a value of the wrong type.
    """
    return _load(path or config_path())


@lru_cache(maxsize=8)
def _load(path: str) -> ConfigFile:
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return ConfigFile(path, exists=False)
    except OSError as error:
        raise BadInputError(f"cannot read the config file: {error.strerror or error}", path=path) from None
    data = _parse_toml(text, path)
    unknown = sorted(set(data) - {"default_profile", "profiles"})
    if unknown:
        raise BadInputError(f"unknown key {unknown[0]!r} (expected default_profile and [profiles.NAME] tables)",
                            path=path)
    default = data.get("default_profile")
    if default is not None and not isinstance(default, str):
        raise BadInputError("default_profile must be a string", path=path)
    tables = data.get("profiles", {})
    if not isinstance(tables, dict):
        raise BadInputError("profiles must be a table of [profiles.NAME] tables", path=path)
    profiles = {name: _profile(name, table, path) for name, table in tables.items()}
    return ConfigFile(path, True, default, profiles)


def _parse_toml(text: bytes, path: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data: dict[str, Any] = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInputError("the config file is not UTF-8 text", path=path) from None
    except tomllib.TOMLDecodeError as error:
        raise BadInputError(f"not valid TOML: {error}", path=path) from None
    return data


_PROFILE_KEYS = ("storage_options", "spark", "savepoint_dir", "output")


def _profile(name: str, table: Any, path: str) -> Profile:
    where = f"[profiles.{name}]"
    if not isinstance(table, dict):
        raise BadInputError(f"{where} must be a table", path=path)
    unknown = sorted(set(table) - set(_PROFILE_KEYS))
    if unknown:
        raise BadInputError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_PROFILE_KEYS)})", path=path)
    storage = table.get("storage_options")
    if storage is not None and not isinstance(storage, dict):
        raise BadInputError(f"{where}: storage_options must be a table", path=path)
    spark = table.get("spark", {})
    if not isinstance(spark, dict) or set(spark) - {"master", "remote", "conf"}:
        raise BadInputError(f"{where}: spark takes master, remote and conf", path=path)
    conf = spark.get("conf", {})
    if not isinstance(conf, dict):
        raise BadInputError(f"{where}: spark.conf must be a table of Spark settings", path=path)
    output = table.get("output")
    style = _output_style(output, f"{where}: output", path)
    return Profile(
        name, storage_options=storage,
        spark_master=_string(spark.get("master"), f"{where}: spark.master", path),
        spark_remote=_string(spark.get("remote"), f"{where}: spark.remote", path),
        spark_conf={str(k): _conf_value(v) for k, v in conf.items()},
        savepoint_dir=_string(table.get("savepoint_dir"), f"{where}: savepoint_dir", path),
        output=style,
    )


def _string(value: Any, what: str, path: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise BadInputError(f"{what} must be a non-empty string", path=path)
    return value


def _conf_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _output_style(value: Any, what: str, path: str) -> str | None:
    """``output`` as a style: ``"plain"`` or a table ``{json = true}`` / ``{plain = true}``."""
    if value is None:
        return None
    if isinstance(value, str) and value in OUTPUT_STYLES:
        return value
    if isinstance(value, dict) and set(value) <= {"json", "plain"} and all(isinstance(v, bool) for v in value.values()):
        return "json" if value.get("json") else "plain" if value.get("plain") else "rich"
    raise BadInputError(f"{what} must be one of {', '.join(OUTPUT_STYLES)} or a table {{json = true}} / "
                        "{plain = true}", path=path)


# ---------------------------------------------------------------- the profile in effect


@dataclass(frozen=True)
class Setting:
    """One setting in effect: its value and where it came from (``flag``, ``env``, ``profile``,
    ``default``) with the detail (the variable, the profile and file)."""

    key: str
    value: Any
    source: str
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "source": self.source, "detail": self.detail}


_FLAG_PROFILE: str | None = None  # --profile of the running command


def use_profile(name: str | None) -> None:
    """Make ``name`` (``--profile``; ``None``: none given) the profile of the running command."""
    global _FLAG_PROFILE
    _FLAG_PROFILE = name


def active_profile(name: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[Profile | None, str]:
    """The profile in effect and why: ``name`` (``--profile``), ``STATEKIT_PROFILE``, the file's
    ``default_profile``, or a profile named ``default``; ``(None, reason)`` when none applies.

    Raises:
        BadInputError: A profile asked for by name that the file does not hold.
    """
    env = os.environ if environ is None else environ
    config = load_config(config_path(env))
    for chosen, why in ((name or _FLAG_PROFILE, "--profile"), (env.get(PROFILE_ENV) or None, PROFILE_ENV),
                        (config.default_profile, f"default_profile of {config.path}")):
        if chosen:
            if chosen not in config.profiles:
                known = ", ".join(sorted(config.profiles)) or "none"
                raise BadInputError(f"profile {chosen!r} ({why}) is not in the config file (profiles: {known})",
                                    path=config.path)
            return config.profiles[chosen], why
    if "default" in config.profiles:
        return config.profiles["default"], "the profile named default"
    return None, "no profile" if config.exists else "no config file"


def resolve(key: str, flag: Any = None, *, profile: str | None = None,
            environ: Mapping[str, str] | None = None) -> Setting:
    """Setting ``key`` in effect: ``flag`` (when given), its environment variable, the profile, else unset."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return Setting(key, flag, "flag")
    variable = ENV_OF.get(key)
    if variable and env.get(variable) and key != "storage_options":
        return Setting(key, env[variable], "env", variable)
    chosen, _ = active_profile(profile, env)
    if chosen is not None and chosen.get(key) is not None:
        return Setting(key, chosen.get(key), "profile", f"{chosen.name} ({config_path(env)})")
    value, detail = DEFAULTS.get(key, (None, None))
    return Setting(key, value, "default", detail)


def output_style(environ: Mapping[str, str] | None = None) -> str | None:
    """``json``, ``plain`` or ``rich`` from ``STATEKIT_OUTPUT`` or the profile; ``None`` when unset.

    Raises:
        BadInputError: ``STATEKIT_OUTPUT`` holds something else.
    """
    setting = resolve("output", environ=environ)
    if setting.source == "env" and setting.value not in OUTPUT_STYLES:
        raise BadInputError(f"{OUTPUT_ENV}={setting.value!r}: expected one of {', '.join(OUTPUT_STYLES)}")
    value: str | None = setting.value
    return value


@dataclass(frozen=True)
class ConfigReport:
    """``statekit config show``: the file, the profile in effect and why, every setting's value and source."""

    json_shape: ClassVar[JsonShape] = JsonShape(rename={"path": "config_file"})

    path: str
    exists: bool
    profile: str | None
    profile_source: str
    profiles: tuple[str, ...]
    settings: tuple[Setting, ...]


def config_report(profile: str | None = None, environ: Mapping[str, str] | None = None) -> ConfigReport:
    """What is in effect for a command started now (without its flags) and where each value came from."""
    from statekit.statefmt.storage_options import StorageOptions

    env = os.environ if environ is None else environ
    config = load_config(config_path(env))
    chosen, why = active_profile(profile, env)
    settings = [resolve(key, profile=profile, environ=env)
                for key in ("spark.master", "spark.remote", "spark.conf", "savepoint_dir", "output")]
    base = StorageOptions.of(chosen.storage_options or {}) if chosen is not None else StorageOptions()
    from_env = StorageOptions.from_env(env)
    for key, value in sorted(base.merged(from_env).options.items()):
        in_env = key in from_env.options
        settings.append(Setting(f"storage_options.{key}", value, "env" if in_env else "profile",
                                "STATEKIT_STORAGE_OPTIONS" if in_env else
                                f"{chosen.name} ({config.path})" if chosen is not None else None))
    return ConfigReport(config.path, config.exists, chosen.name if chosen else None, why,
                        tuple(sorted(config.profiles)), tuple(settings))


def profile_storage_options(profile: str | None = None) -> dict[str, Any]:
    """The storage options of the profile in effect (``{}`` without one)."""
    chosen, _ = active_profile(profile)
    return dict(chosen.storage_options or {}) if chosen is not None else {}
