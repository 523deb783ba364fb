"""Object-store options (fsspec's ``storage_options``): one frozen spec, from the command line
and the environment, applied by :meth:`statekit.statefmt.fileio.FileIO.for_path`.

Sources, later ones winning key by key:

1. ``STATEKIT_STORAGE_OPTIONS``: a JSON object, e.g.
   ``{"key": "...", "secret": "...", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}``;
2. ``--storage-option KEY=VALUE`` (repeatable) on a command. ``KEY`` may be dotted
   (``client_kwargs.endpoint_url=URL`` sets ``{"client_kwargs": {"endpoint_url": URL}}``);
   ``VALUE`` is read as JSON when it parses (``true``, ``3``, ``{"a": 1}``, ``"007"``), else
   it is the string as written;
3. options a library caller passes explicitly to ``FileIO.for_path``.

The command line writes the merged options back to ``STATEKIT_STORAGE_OPTIONS`` of its own
process, so a process it starts (a detached job, Spark's local workers) opens the same stores.

Invariant: the options reach object stores only; local paths (``/x``, ``file://``) and
``memory://`` are opened without them, so ``anon=true`` for s3 never breaks a local output.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statekit.statefmt.errors import BadInputError

__all__ = ["StorageOptions", "STORAGE_OPTIONS_ENV", "LOCAL_PROTOCOLS", "storage_options_for"]

STORAGE_OPTIONS_ENV = "STATEKIT_STORAGE_OPTIONS"
LOCAL_PROTOCOLS = frozenset({"", "file", "local", "memory"})


@dataclass(frozen=True)
class StorageOptions:
    """fsspec options for object stores; build with :meth:`parse`, :meth:`from_env`, :meth:`merged`.

    Attributes:
        options: The options as fsspec takes them (nested for ``client_kwargs``); a JSON text
            internally, so the spec is immutable and hashable.
    """

    _json: str = field(default="{}")

    @property
    def options(self) -> dict[str, Any]:
        """A fresh copy of the options (callers may hand it to fsspec, which may keep it)."""
        value: dict[str, Any] = json.loads(self._json)
        return value

    def __bool__(self) -> bool:
        return self._json != "{}"

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> StorageOptions:
        """The spec of a mapping of JSON values."""
        try:
            return cls(json.dumps(dict(options), sort_keys=True))
        except (TypeError, ValueError) as error:
            raise BadInputError(f"storage options must be JSON values: {error}") from None

    @classmethod
    def parse(cls, pairs: Iterable[str]) -> StorageOptions:
        """The spec of ``KEY=VALUE`` pairs (dotted keys nest, JSON values are decoded).

        Raises:
            BadInputError: A pair without ``=`` or with an empty key or key part.
        """
        options: dict[str, Any] = {}
        for pair in pairs:
            key, sep, text = pair.partition("=")
            parts = key.strip().split(".")
            if not sep or not all(parts):
                raise BadInputError(f"invalid storage option {pair!r}: expected KEY=VALUE, e.g. anon=true "
                                    "or client_kwargs.endpoint_url=http://127.0.0.1:9000")
            _set_dotted(options, parts, _value(text), pair)
        return cls.of(options)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StorageOptions:
        """The spec in ``STATEKIT_STORAGE_OPTIONS`` (empty when unset or blank).

        Raises:
            BadInputError: The variable is not a JSON object.
        """
        text = (os.environ if environ is None else environ).get(STORAGE_OPTIONS_ENV, "").strip()
        if not text:
            return cls()
        try:
            value = json.loads(text)
        except ValueError as error:
            raise BadInputError(f"{STORAGE_OPTIONS_ENV} is not JSON ({error}); set it to an object such as "
                                '{"anon": true}') from None
        if not isinstance(value, dict):
            raise BadInputError(f"{STORAGE_OPTIONS_ENV} must be a JSON object, got {type(value).__name__}")
        return cls.of(value)

    def merged(self, other: StorageOptions | Mapping[str, Any] | None) -> StorageOptions:
        """These options with ``other``'s on top (nested objects such as ``client_kwargs`` merge)."""
        if other is None:
            return self
        top = other.options if isinstance(other, StorageOptions) else dict(other)
        return StorageOptions.of(_deep_merge(self.options, top))

    def to_env(self) -> dict[str, str]:
        """``{STATEKIT_STORAGE_OPTIONS: JSON}``: the environment that carries these options."""
        return {STORAGE_OPTIONS_ENV: self._json}


def storage_options_for(url: str, explicit: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fsspec options to open ``url`` with: the environment's, then ``explicit`` on top.

    Local paths and ``memory://`` get ``explicit`` only.
    """
    protocol = url.split("://", 1)[0].lower() if "://" in url else ""
    if protocol in LOCAL_PROTOCOLS:
        return dict(explicit or {})
    return StorageOptions.from_env().merged(explicit).options


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _set_dotted(options: dict[str, Any], parts: list[str], value: Any, pair: str) -> None:
    node = options
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise BadInputError(f"invalid storage option {pair!r}: {part!r} is already set to a value")
        node = child
    node[parts[-1]] = value


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        old = merged.get(key)
        merged[key] = _deep_merge(old, value) if isinstance(old, dict) and isinstance(value, Mapping) else value
    return merged
