"""The gateway's failures, and how an exception raised by a LiteLLM call maps to one (`classify`).

Every failure is an `LLMError` (a `WorkbenchError`; the compaction layer turns any failure of
a summarizer into its own `SummarizerError`). Messages never hold secrets (see `options.redact`).

| class                  | when                                                     | retried |
|------------------------|----------------------------------------------------------|---------|
| `RateLimited`          | HTTP 429                                                 | yes     |
| `Timeout`              | no answer within the per-attempt timeout, HTTP 408       | yes     |
| `ProviderError`        | 5xx, 409/425, a dropped connection                       | yes     |
| `ProviderError`        | another 4xx, any other failure                           | no      |
| `BadResponse`          | malformed JSON, no choices, `content: null`              | on request |
| `AuthenticationFailed` | HTTP 401/403, a missing or rejected key                  | no      |
| `ConnectionFailed`     | connection refused, unknown host                         | no      |

The last two are reported at once, naming the model and the endpoint (`api_base`).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Sequence
from typing import Any

from workbench.errors import WorkbenchError
from workbench.llm.options import redact
from workbench.llm.retry import retry_after_seconds

__all__ = [
    "AuthenticationFailed",
    "BadResponse",
    "ConnectionFailed",
    "LLMError",
    "ProviderError",
    "RateLimited",
    "Timeout",
    "classify",
]


class LLMError(WorkbenchError):
    """A model call failed for good (after the gateway's retries). Messages never hold secrets.

    model: the model string; attempts: HTTP attempts made; status_code: the provider's HTTP
    status when known; retry_after: the wait the provider asked for (seconds), when it did;
    provider_error: the name of LiteLLM's exception type; api_base: the endpoint, when one was set.
    """

    retryable = False
    malformed = False

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        attempts: int = 0,
        status_code: int | None = None,
        retry_after: float | None = None,
        provider_error: str | None = None,
        retryable: bool | None = None,
        api_base: str | None = None,
    ):
        super().__init__(message)
        self.model = model
        self.attempts = attempts
        self.status_code = status_code
        self.retry_after = retry_after
        self.provider_error = provider_error
        self.api_base = api_base
        if retryable is not None:
            self.retryable = retryable

    def __reduce__(self) -> Any:  # keep keyword attributes through copy/pickle
        return (_rebuild_error, (type(self), self.args, self.__dict__))


def _rebuild_error(cls: type[LLMError], args: tuple[Any, ...], state: dict[str, Any]) -> LLMError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class RateLimited(LLMError):
    """HTTP 429 still returned after the retries (or asking for a longer wait than allowed)."""

    retryable = True


class ProviderError(LLMError):
    """The provider failed: 5xx or a dropped connection after the retries, or a 4xx (not retried)."""


class Timeout(LLMError):
    """No answer within the per-attempt `timeout`, after the retries."""

    retryable = True


class BadResponse(LLMError):
    """The provider answered something unusable: malformed JSON, no choices, `content: null`."""

    malformed = True


class AuthenticationFailed(LLMError):
    """The provider refused the credentials (HTTP 401/403) or no key was given; never retried."""


class ConnectionFailed(LLMError):
    """No connection could be made (refused, unknown host); never retried."""


_JSON_ERROR = re.compile(
    r"Expecting value|Expecting property name|Unterminated string|Extra data|"
    r"Invalid control character|JSONDecodeError|Empty or invalid response"
)
_MISSING_KEY = re.compile(
    r"missing credentials|api_key client option must be set|missing [\w ]*api[ _]?key|"
    r"no api[ _]?key|api[ _]?key (?:is )?(?:not set|not found|required)",
    re.IGNORECASE,
)
_TIMEOUTS = frozenset(
    {
        "Timeout",
        "APITimeoutError",
        "TimeoutException",
        "ReadTimeout",
        "ConnectTimeout",
        "TimeoutError",
        "PoolTimeout",
        "WriteTimeout",
    }
)
_AUTH_ERRORS = frozenset({"AuthenticationError", "PermissionDeniedError"})
_UNKNOWN_HOST = frozenset({"gaierror", "ClientConnectorDNSError", "NameResolutionError"})
_NOT_CONNECTED = frozenset({"ConnectError", "ClientConnectorError", "ConnectionRefusedError", *_UNKNOWN_HOST})
_DROPPED = frozenset(
    {
        "APIConnectionError",
        "RemoteProtocolError",
        "ReadError",
        "ConnectionError",
        "ServerDisconnectedError",
        "ClientConnectionError",
        "ConnectionResetError",
        "ClientOSError",
    }
)
_SERVER_ERRORS = frozenset({"InternalServerError", "ServiceUnavailableError", "BadGatewayError", "APIError"})


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 12 and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    try:
        return int(status) if status is not None else None
    except (TypeError, ValueError):
        return None


def _headers(exc: BaseException) -> dict[str, str]:
    """Response headers of a LiteLLM exception (1.106: `litellm_response_headers`; else `response.headers`)."""
    found: dict[str, str] = {}
    for source in (
        getattr(getattr(exc, "response", None), "headers", None),
        getattr(exc, "headers", None),
        getattr(exc, "litellm_response_headers", None),
    ):
        if source:
            try:
                found.update({str(k).lower(): str(v) for k, v in dict(source).items()})
            except Exception:
                pass
    return found


def _where(model: str, api_base: str | None) -> str:
    return f"{model} at {api_base}" if api_base else f"{model} (provider's default endpoint)"


def _named(model: str, api_base: str | None) -> str:
    """The model, and the endpoint when one was set (two deployments of one model fail apart)."""
    return f"{model} at {api_base}" if api_base else model


def _authentication_failed(
    what: str, message: str, common: dict[str, Any], *, status_code: int | None
) -> AuthenticationFailed:
    return AuthenticationFailed(
        f"{_where(common['model'], common['api_base'])}: authentication failed ({what}): {message}; check the key "
        f"(the `api_key` or `api_key_env` option, or the provider's usual environment variable)",
        **common,
        status_code=status_code,
    )


def missing_key(model: str, api_base: str | None) -> AuthenticationFailed:
    """The error for a call that would go out without the key its provider requires (nothing is sent)."""
    common: dict[str, Any] = {"model": model, "attempts": 1, "provider_error": None, "api_base": api_base}
    return _authentication_failed(
        "no usable API key", "no API key was given and OPENAI_API_KEY is not set", common, status_code=None
    )


def classify(
    exc: BaseException, *, model: str, attempts: int, secrets: Sequence[str] = (), api_base: str | None = None
) -> LLMError:
    """Map an exception raised by a LiteLLM call to the gateway's error types (retryable or not)."""
    if isinstance(exc, LLMError):
        return exc
    name = type(exc).__name__
    message = redact(str(exc) or name, secrets)
    status = _status(exc)
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    statuses = {s for s in map(_status, chain) if s is not None}
    common: dict[str, Any] = {"model": model, "attempts": attempts, "provider_error": name, "api_base": api_base}
    who = _named(model, api_base)
    if any(isinstance(e, json.JSONDecodeError) for e in chain) or _JSON_ERROR.search(message):
        return BadResponse(f"{who}: malformed response body: {message}", **common, status_code=status)
    if name in _TIMEOUTS or isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or status == 408:
        return Timeout(f"{who}: timed out: {message}", **common, status_code=status)
    if name == "RateLimitError" or status == 429:
        wait = retry_after_seconds(_headers(exc))
        return RateLimited(f"{who}: rate limited (HTTP 429): {message}", **common, status_code=429, retry_after=wait)
    auth_status = next((s for s in (401, 403) if s in statuses), None)
    if auth_status is not None or names & _AUTH_ERRORS or any(_MISSING_KEY.search(str(e)) for e in chain):
        what = f"HTTP {auth_status}" if auth_status else "no usable API key"
        return _authentication_failed(what, message, common, status_code=auth_status or status)
    if names & _NOT_CONNECTED or any(isinstance(e, (ConnectionRefusedError, socket.gaierror)) for e in chain):
        unknown_host = bool(names & _UNKNOWN_HOST) or any(isinstance(e, socket.gaierror) for e in chain)
        reason = "unknown host" if unknown_host else "connection refused"
        return ConnectionFailed(
            f"{_where(model, api_base)}: cannot connect ({reason}): {message}; "
            f"is the server running and `api_base` right?",
            **common,
        )
    if names & _DROPPED:
        return ProviderError(f"{who}: connection failed: {message}", **common, status_code=status, retryable=True)
    if status is not None and (status >= 500 or status in (409, 425)):
        return ProviderError(
            f"{who}: provider error (HTTP {status}): {message}", **common, status_code=status, retryable=True
        )
    if name in _SERVER_ERRORS:
        return ProviderError(f"{who}: provider error: {message}", **common, status_code=status, retryable=True)
    if status is not None:
        return ProviderError(
            f"{who}: request rejected (HTTP {status}): {message}", **common, status_code=status, retryable=False
        )
    return ProviderError(f"{who}: call failed ({name}): {message}", **common, retryable=False)
