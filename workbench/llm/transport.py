"""The HTTP connection pool the gateway lends LiteLLM for synchronous OpenAI-compatible calls.

Left to itself, LiteLLM sends every synchronous call of a process through one cached httpx
client with httpx's default pool: at most 20 idle connections kept. httpcore (1.0.9, the latest
release) counts every pooled connection, busy or idle, against that bound. With more than 20
calls in flight two things go wrong:
- nearly every connection is closed as its response ends, so nearly every call opens a new one
  (measured: 180-199 new connections for 200 calls at 40 in flight; with a real provider each is
  a TLS handshake);
- the pool can close a connection that another thread has just taken for its request, and that
  request then waits for its whole read timeout (encode/httpcore#1110; measured here: one
  400-call run in about twenty stalled for the timeout, 30 s, then retried).

The gateway's clients keep alive every connection they open, so neither can happen; how many
they open is bounded by the gateway's per-model limiters.

The gateway keeps `POOLS` such clients and hands each thread one of them, in turn. httpcore's pool
looks at every one of its connections whenever it hands out or takes back one, so a single pool
costs time quadratic in the calls in flight: at 40 in flight, 200 calls made 358,000 of those
looks, and the run lost about 3 % of its wall time to them (`make bench`, experiments).

A call through a lent pool holds its model's concurrency slot only while its request is on the
wire (`on_the_wire`), so LiteLLM's own work before and after it never delays another call.

A client is lent only where LiteLLM's own HTTP transport serves the call (provider `openai`
with `EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER`, which `workbench.offline.LITELLM_DEFAULTS`
sets): the OpenAI SDK path takes SDK clients.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

__all__ = ["LENDING_PROVIDERS", "POOLS", "Slots", "lends_client", "on_the_wire", "pooled_handler"]

#: Providers whose synchronous calls take an `HTTPHandler` as LiteLLM's `client` argument.
LENDING_PROVIDERS = frozenset({"openai"})
#: Connection pools per gateway (a thread keeps the one it was given at its first call).
POOLS = 8
_SWITCH = "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER"
#: LiteLLM passes each request the model's timeout; this only stands in for it if one is ever missing
#: (httpx's own default, 5 s, would cut slow summaries short).
_FALLBACK_TIMEOUT = 600.0


def lends_client(provider: str) -> bool:
    """True when a synchronous call to `provider` goes through LiteLLM's HTTP transport (and so can
    use the gateway's pool): the switch is read at each call, by LiteLLM's own reader (only "true"
    turns it on), so the two never disagree."""
    if provider not in LENDING_PROVIDERS:
        return False
    try:
        from litellm.secret_managers.main import get_secret_bool
    except ImportError:  # another LiteLLM layout: read the switch as this one does
        return os.environ.get(_SWITCH, "").strip().lower() == "true"
    return bool(get_secret_bool(_SWITCH))


def pooled_handler(litellm: Any) -> Any:
    """A LiteLLM `HTTPHandler` over an httpx client that never drops an idle connection for being
    one too many (no bound on kept connections; idle ones still expire after httpx's 5 s).

    TLS verification and the client certificate follow LiteLLM's own settings (`SSL_VERIFY`,
    `SSL_CERT_FILE`, `litellm.ssl_verify`, `SSL_CERTIFICATE`), as its cached client does.
    """
    import httpx
    from litellm.llms.custom_httpx import http_handler

    ssl = getattr(http_handler, "get_ssl_configuration", None)
    verify: Any = ssl(None) if ssl is not None else True
    cert = os.getenv("SSL_CERTIFICATE", getattr(litellm, "ssl_certificate", None))
    headers = getattr(http_handler, "get_default_headers", None)
    client = httpx.Client(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        timeout=_FALLBACK_TIMEOUT,
        verify=verify,
        cert=cert,
        follow_redirects=True,
        headers=headers() if headers is not None else None,
        event_hooks={"request": [_take_slot], "response": [_give_slot_back]},
    )
    return http_handler.HTTPHandler(client=client)


class Slots(Protocol):
    """What `on_the_wire` needs of a limiter (`workbench.llm.concurrency.Limiter` is one)."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


_wire = threading.local()


@contextmanager
def on_the_wire(limiter: Slots) -> Iterator[None]:
    """Inside the block, a request this thread sends through a `pooled_handler` pool holds a slot
    of `limiter` from the moment it goes out until its whole answer is read.

    Held around the whole `litellm.completion` call instead, a slot would also cover LiteLLM's
    own work before the request and after the answer (a few milliseconds of CPU each, more when
    many threads share the interpreter), and a call waiting for the slot could only start that
    work once it had one. Calls in flight to the provider stay bounded by the limiter all the same.
    """
    outer = getattr(_wire, "limiter", None), getattr(_wire, "held", None)
    _wire.limiter, _wire.held = limiter, None
    try:
        yield
    finally:
        held = _wire.held
        _wire.limiter, _wire.held = outer
        if held is not None:  # the request failed before its answer came back
            held.release()


def _take_slot(request: Any) -> None:
    limiter = getattr(_wire, "limiter", None)
    if limiter is not None and getattr(_wire, "held", None) is None:
        limiter.acquire()
        _wire.held = limiter


def _give_slot_back(response: Any) -> None:
    held = getattr(_wire, "held", None)
    if held is None:
        return
    try:
        response.read()  # the gateway never streams: the answer is read here rather than just after
    finally:
        _wire.held = None
        held.release()
