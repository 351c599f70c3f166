"""How a model's options are sorted (sent and hashed, sent only, kept by the gateway) and kept secret.

Secrets (`api_key` and any option whose name says key/secret/token/password/credentials) are sent
but never part of a cache key, never stored, and masked in every error message (`redact`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "GATEWAY_OPTIONS",
    "RESERVED_OPTIONS",
    "TRANSPORT_OPTIONS",
    "endpoint",
    "is_secret_option",
    "plain_messages",
    "redact",
    "secret_values",
    "split_options",
]

#: Options the gateway consumes itself (never sent to LiteLLM).
GATEWAY_OPTIONS = frozenset(
    {
        "concurrency",
        "repeat",
        "num_retries",
        "max_retries",
        "cache",
        "api_key_env",
        "input_cost_per_token",
        "output_cost_per_token",
    }
)
#: Options sent to LiteLLM that are not parameters of the answer (not among the cache key's params;
#: the endpoint, `api_base`/`base_url`, enters the key apart: see `endpoint`).
TRANSPORT_OPTIONS = frozenset(
    {
        "api_base",
        "base_url",
        "api_version",
        "timeout",
        "request_timeout",
        "stream_timeout",
        "extra_headers",
        "headers",
        "organization",
        "client",
        "aws_region_name",
        "vertex_location",
        "vertex_project",
        "metadata",
        "litellm_logging_obj",
        "drop_params",
    }
)
#: Options a model's configuration may not set.
RESERVED_OPTIONS = frozenset({"model", "messages", "stream"})

_SECRET_NAME = re.compile(
    r"(?:^|_)(?:api_?key|key|keys|secret|secrets|password|passwd|pwd|token|credentials?|authorization|auth|cookie)(?:$|_)",
    re.IGNORECASE,
)
_SECRET_PATTERNS = (
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{6,}"), r"\1-***"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9_\-.=:+/]{6,}"), r"\1 ***"),
    (
        re.compile(r"(?i)((?:api[_-]?key|x-api-key|authorization|token|secret)[\"']?\s*[:=]\s*[\"']?)[^\"'\s,}&]{4,}"),
        r"\1***",
    ),
)


def is_secret_option(name: str) -> bool:
    """True for option names that hold credentials (`api_key`, `aws_secret_access_key`, ...)."""
    return bool(_SECRET_NAME.search(name)) and name not in ("max_tokens", "max_completion_tokens")


def _env_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    return [value for name, value in environ.items() if value and len(value) >= 8 and is_secret_option(name.lower())]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the given secret values, the environment's keys and key-like strings masked."""
    for secret in sorted(
        {s for s in (*secrets, *_env_secrets()) if isinstance(s, str) and len(s) >= 4}, key=len, reverse=True
    ):
        text = text.replace(secret, "***")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The secret values among `options` (to mask in messages), header values included."""
    values: list[str] = []
    for name, value in options.items():
        if is_secret_option(name) and isinstance(value, str):
            values.append(value)
        elif name in ("extra_headers", "headers") and isinstance(value, Mapping):
            values.extend(str(v) for v in value.values())
    return values


def endpoint(api_base: str | None) -> str | None:
    """The endpoint an `api_base` names, as the cache key holds it: scheme, host, port and path, with
    no trailing slash and no credentials (user:password@, query string, fragment), or None for none.

    Two endpoints may serve different models under one name, so the endpoint is part of the key;
    what authenticates a request is not (another key gets the same answer).
    """
    if not api_base:
        return None
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(str(api_base).strip())
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme.lower(), host.lower(), parts.path.rstrip("/"), "", "")) or None


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(params, transport, gateway): what is part of the cache key, what is only sent, what the gateway keeps.

    Secrets go to `transport` (sent, never hashed or stored).
    """
    params: dict[str, Any] = {}
    transport: dict[str, Any] = {}
    gateway: dict[str, Any] = {}
    for name, value in options.items():
        if name in GATEWAY_OPTIONS:
            gateway[name] = value
        elif name in TRANSPORT_OPTIONS or is_secret_option(name):
            transport[name] = value
        else:
            params[name] = value
    return params, transport, gateway


def plain_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI-style dicts from dicts or workbench `Message`s."""
    out = []
    for message in messages:
        if isinstance(message, Mapping):
            out.append(dict(message))
        elif hasattr(message, "to_openai"):
            out.append(message.to_openai())
        else:
            raise TypeError(f"a message must be a dict or a workbench Message, not {type(message).__name__}")
    return out
