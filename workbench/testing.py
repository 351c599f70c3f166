"""A local OpenAI-compatible chat server for tests and benchmarks (no network beyond 127.0.0.1).

    from workbench.testing import FakeOpenAI, Fault

    with FakeOpenAI(latency=0.2) as server:
        gateway.model("openai/fake", {"api_base": server.api_base, "api_key": "sk-dummy"})
        server.script(Fault.rate_limit(retry_after=1), "then this text")
        ...
        assert server.request_count == 2

It serves `POST /v1/chat/completions` (and `/chat/completions`) from an aiohttp application
running on its own event loop in a background thread, so hundreds of concurrent requests, each
sleeping `latency` seconds, are served in parallel rather than one after another.

What each request gets, in order of precedence:
1. the next item of the script queue (`script(...)`), if any is left;
2. else `responder(request_body)`, when a responder is given;
3. else a deterministic default text derived from the request's messages.

An item is a `str` (the assistant's text), a `Fault` (an error or a malformed answer), or a
callable taking the request body and returning a `str` or a `Fault`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FakeOpenAI", "FakeOpenAIProcess", "Fault", "Item"]


@dataclass(frozen=True)
class Fault:
    """A scripted misbehaviour. Build with the class methods below."""

    kind: str
    status: int = 200
    retry_after: float | str | None = None
    text: str = ""
    seconds: float = 0.0
    headers: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def rate_limit(cls, retry_after: float | str | None = 1, *, retry_after_ms: int | None = None) -> Fault:
        """HTTP 429 with a `Retry-After` header (seconds; None = no header)."""
        extra = (("retry-after-ms", str(retry_after_ms)),) if retry_after_ms is not None else ()
        return cls("rate_limit", status=429, retry_after=retry_after, headers=extra)

    @classmethod
    def error(cls, status: int = 500, message: str = "internal error") -> Fault:
        """An HTTP error status with an OpenAI-style error body (500, 502, 503, 400, 401, ...)."""
        return cls("error", status=status, text=message)

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Fault:
        """Accept the request and send nothing for `seconds` (longer than the client's timeout)."""
        return cls("hang", seconds=seconds)

    @classmethod
    def malformed(cls, body: str = '{"id": "chatcmpl-x", "choices": [') -> Fault:
        """HTTP 200 with a body that is not valid JSON."""
        return cls("malformed", text=body)

    @classmethod
    def empty_choices(cls) -> Fault:
        """HTTP 200, valid JSON, `choices: []`."""
        return cls("empty_choices")

    @classmethod
    def null_content(cls) -> Fault:
        """HTTP 200, one choice whose message has `content: null` (and no tool calls)."""
        return cls("null_content")

    @classmethod
    def truncated(cls, text: str = "This summary was cut off because") -> Fault:
        """HTTP 200 with `text` and `finish_reason: "length"` (output limit reached)."""
        return cls("truncated", text=text)

    @classmethod
    def no_usage(cls, text: str = "an answer without usage") -> Fault:
        """HTTP 200 with `text` but no `usage` object (the provider omitted token counts)."""
        return cls("no_usage", text=text)


Item = str | Fault | Callable[[dict[str, Any]], "str | Fault"]


def default_text(body: dict[str, Any]) -> str:
    """The default answer: deterministic in the request (so scheduling never changes results)."""
    messages = body.get("messages") or []
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]
    last = ""
    for message in reversed(messages):
        content = message.get("content")
        if isinstance(content, str) and content:
            last = content
            break
    return f"Summary {digest}: {last[:60]}"


def _item_to_json(item: str | Fault) -> dict[str, Any]:
    if isinstance(item, str):
        return {"text": item}
    if isinstance(item, Fault):
        data = dataclasses.asdict(item)
        data["headers"] = [list(pair) for pair in item.headers]
        return {"fault": data}
    raise TypeError("a FakeOpenAIProcess script item must be a str or a Fault (callables stay in-process)")


def _item_from_json(data: dict[str, Any]) -> str | Fault:
    if "text" in data:
        return str(data["text"])
    fault = dict(data["fault"])
    fault["headers"] = tuple(tuple(pair) for pair in fault.get("headers") or ())
    return Fault(**fault)


def _text_of(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


class _Endpoint:
    """The addresses of a fake server listening on `host`:`port`."""

    host: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_base(self) -> str:
        """What to pass as litellm's `api_base` (the `/v1` root)."""
        return f"{self.base_url}/v1"


class FakeOpenAI(_Endpoint):
    """An OpenAI-compatible `/v1/chat/completions` server on 127.0.0.1, as a context manager.

    latency: seconds from a request's arrival to its answer, the server's own reading and answering
    included, as a provider's latency is measured (asyncio sleep: requests overlap).
    responder: `f(request_body) -> str | Fault` used when the script queue is empty.
    port: 0 picks a free port.

    Counters (thread-safe reads): `request_count`, `in_flight`, `max_in_flight`, `connections`
    (the client connections completions arrived on: distinct peer addresses), `requests` (the JSON
    bodies received, in arrival order), `headers` (each request's headers).
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        responder: Callable[[dict[str, Any]], str | Fault] | None = None,
        script: Iterable[Item] = (),
        port: int = 0,
        host: str = "127.0.0.1",
        model: str | None = None,
        keep_requests: bool = True,
    ):
        self.latency = latency
        self.responder = responder
        self.host = host
        self.port = port
        self.model_name = model
        self.keep_requests = keep_requests
        self._script: collections.deque[Item] = collections.deque(script)
        self._lock = threading.Lock()
        self.request_count = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._peers: set[Any] = set()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # -- scripting -------------------------------------------------------------------------------

    def script(self, *items: Item) -> FakeOpenAI:
        """Queue answers for the next requests, in arrival order."""
        with self._lock:
            self._script.extend(items)
        return self

    def clear_script(self) -> None:
        with self._lock:
            self._script.clear()

    @property
    def pending(self) -> int:
        """Scripted items not yet consumed."""
        with self._lock:
            return len(self._script)

    def reset_counts(self) -> None:
        with self._lock:
            self.request_count = 0
            self.max_in_flight = self.in_flight
            self._peers.clear()
            self.requests.clear()
            self.headers.clear()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name=f"FakeOpenAI:{self.port}", daemon=True)
        self._thread.start()
        self._started.wait(10)
        if self._start_error is not None:
            raise RuntimeError(f"FakeOpenAI failed to start: {self._start_error}") from self._start_error
        if not self._started.is_set():
            raise RuntimeError("FakeOpenAI did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        loop = self._loop
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            future.result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:
            self._start_error = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    async def _startup(self) -> None:
        from aiohttp import web

        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/chat/completions", self._handle)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/_fake/stats", self._stats)
        app.router.add_get("/_fake/requests", self._requests)
        app.router.add_post("/_fake/script", self._script_items)
        app.router.add_post("/_fake/reset", self._reset)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, backlog=1024, reuse_address=True)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []  # asyncio.Server: the port the OS picked
        self.port = sockets[0].getsockname()[1]
        self._runner = runner

    async def _shutdown(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- handlers --------------------------------------------------------------------------------

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"ok": True})

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._peers)

    def stats(self) -> dict[str, int]:
        """request_count, in_flight, max_in_flight, connections and pending (scripted items left)."""
        with self._lock:
            return {
                "request_count": self.request_count,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "connections": len(self._peers),
                "pending": len(self._script),
            }

    async def _stats(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self.stats())

    async def _requests(self, request: Any) -> Any:
        from aiohttp import web

        with self._lock:
            return web.json_response({"requests": list(self.requests), "headers": list(self.headers)})

    async def _script_items(self, request: Any) -> Any:
        from aiohttp import web

        items = [_item_from_json(item) for item in await request.json()]
        self.script(*items)
        return web.json_response({"pending": self.pending})

    async def _reset(self, request: Any) -> Any:
        from aiohttp import web

        self.clear_script()
        self.reset_counts()
        return web.json_response({"ok": True})

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": self.model_name or "fake", "object": "model"}]})

    def _next_item(self, body: dict[str, Any]) -> str | Fault:
        with self._lock:
            item: Item | None = self._script.popleft() if self._script else None
        if item is None:
            item = self.responder if self.responder is not None else default_text
        if callable(item) and not isinstance(item, Fault):
            item = item(body)
        return item

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        loop = asyncio.get_running_loop()
        arrived = loop.time()
        raw = await request.read()
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        with self._lock:
            self.request_count += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._peers.add(request.transport.get_extra_info("peername") if request.transport else None)
            if self.keep_requests:
                self.requests.append(body)
                self.headers.append(dict(request.headers))
        try:
            item = self._next_item(body)
            # a text answer is serialised before the wait: many answers falling due together are
            # then not each late by the time the others took to build
            ready = web.json_response(self._completion(body, item)) if isinstance(item, str) else None
            if self.latency > 0:
                await asyncio.sleep(max(0.0, arrived + self.latency - loop.time()))
            return ready if ready is not None else await self._answer(body, item)
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _answer(self, body: dict[str, Any], item: str | Fault) -> Any:
        from aiohttp import web

        if isinstance(item, str):
            return web.json_response(self._completion(body, item))
        kind = item.kind
        if kind == "rate_limit":
            headers = dict(item.headers)
            if item.retry_after is not None:
                headers["retry-after"] = str(item.retry_after)
            return web.json_response(
                {
                    "error": {
                        "message": "Rate limit reached, please retry",
                        "type": "requests",
                        "code": "rate_limit_exceeded",
                    }
                },
                status=429,
                headers=headers,
            )
        if kind == "error":
            return web.json_response(
                {
                    "error": {
                        "message": item.text,
                        "type": "server_error" if item.status >= 500 else "invalid_request_error",
                        "code": None,
                    }
                },
                status=item.status,
                headers=dict(item.headers),
            )
        if kind == "hang":
            assert self._stopping is not None
            try:
                await asyncio.wait_for(self._stopping.wait(), item.seconds)
            except TimeoutError:
                pass
            return web.json_response(self._completion(body, "answer after a hang"))
        if kind == "malformed":
            return web.Response(text=item.text, status=200, content_type="application/json")
        if kind == "empty_choices":
            payload = self._completion(body, "")
            payload["choices"] = []
            return web.json_response(payload)
        if kind == "null_content":
            payload = self._completion(body, "")
            payload["choices"][0]["message"]["content"] = None
            return web.json_response(payload)
        if kind == "truncated":
            return web.json_response(self._completion(body, item.text, finish_reason="length"))
        if kind == "no_usage":
            payload = self._completion(body, item.text)
            del payload["usage"]
            return web.json_response(payload)
        raise ValueError(f"unknown fault kind {kind!r}")

    def _completion(self, body: dict[str, Any], text: str, *, finish_reason: str = "stop") -> dict[str, Any]:
        prompt = sum(_tokens(_text_of(m.get("content"))) + 4 for m in body.get("messages") or [] if isinstance(m, dict))
        completion = _tokens(text)
        with self._lock:
            number = self.request_count
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name or body.get("model") or "fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }


class FakeOpenAIProcess(_Endpoint):
    """The same server in a child process (`python -m workbench.testing`), for benchmarks.

    In a thread, the server's own work competes with the client for the GIL, which slows the
    client down under load; a provider never shares our interpreter. Scripts accept `str` and
    `Fault` items only; counters are read over HTTP (`/_fake/stats`).
    """

    def __init__(self, *, latency: float = 0.0, port: int = 0, host: str = "127.0.0.1"):
        self.latency = latency
        self.host = host
        self.port = port
        self._process: Any = None

    def start(self) -> FakeOpenAIProcess:
        import subprocess
        import sys

        if self._process is not None:
            return self
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workbench.testing",
                "--latency",
                str(self.latency),
                "--port",
                str(self.port),
                "--host",
                self.host,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self._process.stdout.readline().strip()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"FakeOpenAIProcess did not start (said {line!r})")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
            process.wait(5)
        except Exception:
            process.kill()
            process.wait(5)

    def __enter__(self) -> FakeOpenAIProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        import urllib.request

        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = self._call("GET", "/_fake/stats")
        return stats

    @property
    def request_count(self) -> int:
        return int(self.stats()["request_count"])

    @property
    def max_in_flight(self) -> int:
        return int(self.stats()["max_in_flight"])

    @property
    def connections(self) -> int:
        return int(self.stats()["connections"])

    @property
    def requests(self) -> list[dict[str, Any]]:
        requests: list[dict[str, Any]] = self._call("GET", "/_fake/requests")["requests"]
        return requests

    def script(self, *items: str | Fault) -> FakeOpenAIProcess:
        self._call("POST", "/_fake/script", [_item_to_json(item) for item in items])
        return self

    def reset_counts(self) -> None:
        self._call("POST", "/_fake/reset", {})


def main(argv: list[str] | None = None) -> None:
    """Serve until stdin closes: `python -m workbench.testing --latency 0.2` prints `PORT <n>`."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m workbench.testing", description=main.__doc__)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    with FakeOpenAI(latency=args.latency, port=args.port, host=args.host, keep_requests=True) as server:
        print(f"PORT {server.port}", flush=True)
        try:
            sys.stdin.read()  # returns when the parent closes the pipe (or dies)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
