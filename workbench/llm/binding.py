"""A model bound to its options: what strategies, probes and judges call (`BoundModel`).

`BoundModel` satisfies `workbench.compaction.Summarizer`. One call is written once, as a plan
(a generator yielding the steps that block: wait for an identical call in flight, make an HTTP
attempt, sleep before a retry) run by a synchronous driver (`complete`, threads) or an
asynchronous one (`acomplete`, asyncio; its HTTP attempts go out from the gateway's sender threads,
see `BoundModel._send`). The plan asks the cache, joins or leads the flight of
its key, retries under the gateway's `RetryPolicy`, parses and prices the answer and stores it.
It knows the gateway only through `GatewayAPI`, the protocol of what it needs from one. The
offline `workbench/extractive` is answered in process (`BoundModel.in_process`): its attempt calls
`workbench.llm.provider.offline_answer` instead of LiteLLM; the rest of the plan is the same.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
import os
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

from workbench.compaction import Completion
from workbench.extractive import MODEL_STRING as OFFLINE_MODEL
from workbench.llm.cache import Cache, CacheEntry, canonical_json, key_material
from workbench.llm.concurrency import Flight, Limiter
from workbench.llm.errors import BadResponse, LLMError, classify, missing_key
from workbench.llm.options import (
    RESERVED_OPTIONS,
    is_secret_option,
    plain_messages,
    redact,
    secret_values,
    split_options,
)
from workbench.llm.pricing import Prices, call_cost
from workbench.llm.provider import OfflineAnswer, load_litellm, offline_answer
from workbench.llm.retry import RetryPolicy
from workbench.llm.transport import lends_client, on_the_wire

__all__ = ["BoundModel", "GatewayAPI", "capped_output"]

log = logging.getLogger("workbench.llm")


#: A caller's rule for its answers: why a text is of no use to it, or None when it is.
Validator = Callable[[str], "str | None"]


@dataclass
class _Request:
    key: str
    material_json: str  # the canonical JSON the key hashes, which the cache stores
    kwargs: dict[str, Any]
    use_cache: bool
    validate: Validator | None = None
    stored_rejected: bool = False  # the cache held an answer `validate` refused: the next one replaces it

    def usable(self, entry: CacheEntry) -> bool:
        """Whether `entry` may be served and stored for this request: usable by any caller
        (`CacheEntry.usable`) and by this one (`validate`)."""
        return entry.usable and (self.validate is None or self.validate(entry.text) is None)

    def served(self, entry: CacheEntry) -> bool:
        """Whether a stored `entry` answers this request; one only `validate` refuses is noted, so that
        the answer asked instead takes its place in the cache (the first stored otherwise wins)."""
        if self.usable(entry):
            return True
        self.stored_rejected = self.stored_rejected or entry.usable
        return False


def _repeated_keys(requests: Sequence[_Request]) -> set[str]:
    """The cache keys a batch holds more than once."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for request in requests:
        (repeated if request.key in seen else seen).add(request.key)
    return repeated


# the steps a plan yields to its driver


@dataclass(frozen=True)
class _Wait:
    """Wait until an identical call in flight lands (sends back None)."""

    flight: Flight


@dataclass(frozen=True)
class _Attempt:
    """Make one HTTP attempt under the model's limiter (sends back (response, seconds) or throws)."""

    request: _Request


@dataclass(frozen=True)
class _Sleep:
    """Back off before the next attempt (sends back None)."""

    seconds: float


_Step = _Wait | _Attempt | _Sleep


class GatewayAPI(Protocol):
    """What a `BoundModel` uses of its gateway (`workbench.llm.gateway.Gateway` provides it)."""

    cache: Cache
    retry: RetryPolicy
    timeout: float
    num_retries: int
    unknown_cost_models: set[str]

    def limiter(self, model: str, concurrency: int | None = None, api_base: str | None = None) -> Limiter: ...

    def count(self, **deltas: float) -> None: ...

    def join_flight(self, key: str) -> tuple[Flight, bool]: ...

    def land(
        self, key: str, flight: Flight, *, result: Completion | None = None, error: BaseException | None = None
    ) -> None: ...

    def note_unknown_cost(self, model: str) -> None: ...

    def http_client(self) -> Any: ...

    def senders(self) -> Executor: ...

    def warm_up(self) -> None: ...


_Plan = Generator[_Step, Any, Completion]


OUTPUT_LIMIT_OPTIONS = ("max_tokens", "max_completion_tokens")


def capped_output(params: Mapping[str, Any], max_tokens: int | None) -> dict[str, Any]:
    """The request's parameters with the caller's output budget `max_tokens` applied.

    A strategy asks for the summary length its design derives; an output limit the user set in the
    model's options (`max_tokens` or `max_completion_tokens`) caps it: the smaller one is sent, under
    the user's key. Without a user limit the derived budget is sent as `max_tokens`; without a derived
    one the user's options go as they are.
    """
    out = dict(params)
    if max_tokens is None:
        return out
    derived = int(max_tokens)
    user_keys = [
        key
        for key in OUTPUT_LIMIT_OPTIONS
        if isinstance(out.get(key), (int, float)) and not isinstance(out.get(key), bool)
    ]
    if not user_keys:
        out["max_tokens"] = derived
    for key in user_keys:
        out[key] = min(int(out[key]), derived)
    return out


class BoundModel:
    """A model with its options, handed out by `Gateway.model`; satisfies `workbench.compaction.Summarizer`."""

    def __init__(self, gateway: GatewayAPI, model: str, options: Mapping[str, Any]):
        if not model or not isinstance(model, str):
            raise ValueError("model must be a non-empty string such as 'openai/gpt-4o-mini'")
        self.gateway = gateway
        self.model = model
        self.options = dict(options)
        reserved = sorted(RESERVED_OPTIONS & set(self.options))
        if reserved:
            from workbench.errors import ConfigError

            raise ConfigError(
                f"model {model!r}: option(s) {', '.join(reserved)} cannot be set "
                f"(the gateway sets the model and messages, and does not stream)"
            )
        params, transport, own = split_options(self.options)
        if "api_key_env" in own and "api_key" not in transport:
            variable = str(own["api_key_env"])
            value = os.environ.get(variable)
            if value is None:
                from workbench.errors import ConfigError

                raise ConfigError(f"model {model!r}: environment variable {variable} (api_key_env) is not set")
            transport["api_key"] = value
        request_timeout = transport.pop("request_timeout", None)  # LiteLLM's alias: sent as `timeout`
        self._params = params
        self._transport = transport
        self._secrets = secret_values(transport)
        self.api_base: str | None = transport.get("api_base") or transport.get("base_url")
        self.repeat = int(own.get("repeat", 0) or 0)
        retries = own.get("num_retries", own.get("max_retries"))
        self.num_retries = int(gateway.num_retries if retries is None else retries)
        self.timeout = float(transport.get("timeout") or request_timeout or gateway.timeout)
        self.use_cache = bool(own.get("cache", True))
        self.concurrency = int(own["concurrency"]) if own.get("concurrency") else None
        self.limiter: Limiter = gateway.limiter(model, self.concurrency, self.api_base)
        self.prices = Prices(own.get("input_cost_per_token"), own.get("output_cost_per_token"))
        self._provider: str | None = None
        #: Answered in this process by the offline provider's own function (`offline_answer`), with
        #: the cache, flights, counters and Completion of any call but none of LiteLLM's per-call
        #: machinery (nor the limiter: no endpoint to protect). Only `workbench/extractive` is;
        #: False sends it through LiteLLM's custom provider like any model (the same answer).
        self.in_process = model == OFFLINE_MODEL

    def __repr__(self) -> str:
        shown = {k: ("***" if is_secret_option(k) else v) for k, v in self.options.items()}
        return f"BoundModel({self.model!r}, {shown!r})"

    def with_options(self, **changes: Any) -> BoundModel:
        return BoundModel(self.gateway, self.model, {**self.options, **changes})

    def prepare(self) -> None:
        """Pay the one-time start-up (importing LiteLLM) now rather than in the first call. A model
        answered in process has none: LiteLLM (seconds to import) is not loaded for it."""
        if not self.in_process:
            self.gateway.warm_up()

    @property
    def max_attempts(self) -> int:
        return self.num_retries + 1

    # -- requests and answers --

    def _request(
        self, messages: Sequence[Any], max_tokens: int | None, repeat: int | None, validate: Validator | None = None
    ) -> _Request:
        plain = plain_messages(messages)
        params = capped_output(self._params, max_tokens)
        repeat = self.repeat if repeat is None else int(repeat)
        material_json = canonical_json(key_material(self.model, plain, params, repeat, self.api_base))
        key = hashlib.sha256(material_json.encode()).hexdigest()
        kwargs = {
            **params,
            **self._transport,
            "model": self.model,
            "messages": plain,
            "timeout": self.timeout,
            "num_retries": 0,
            "max_retries": 0,
        }
        return _Request(key, material_json, kwargs, self.use_cache, validate)

    def cache_key(self, messages: Sequence[Any], *, max_tokens: int | None = None, repeat: int | None = None) -> str:
        return self._request(messages, max_tokens, repeat).key

    def _hit(self, entry: CacheEntry) -> Completion:
        return Completion(
            text=entry.text,
            model=self.model,
            input_tokens=entry.input_tokens,
            output_tokens=entry.output_tokens,
            cost_usd=entry.cost_usd,
            cache_hit=True,
            finish_reason=entry.finish_reason,
            duration_s=entry.duration_s,
            attempts=0,
        )

    def _parse(self, response: Any, messages: list[dict[str, Any]], duration: float, attempts: int) -> Completion:
        if isinstance(response, OfflineAnswer):  # answered in process; free, as `call_cost` prices `workbench/`
            return Completion(
                text=response.text,
                model=self.model,
                input_tokens=response.prompt_tokens,
                output_tokens=response.completion_tokens,
                cost_usd=0.0,
                cache_hit=False,
                finish_reason=response.finish_reason,
                duration_s=duration,
                attempts=attempts,
            )
        choices = getattr(response, "choices", None)
        if not choices:
            raise BadResponse(f"{self.model}: the response has no choices", model=self.model, attempts=attempts)
        choice = choices[0]
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None) if message is not None else None
        finish_reason = getattr(choice, "finish_reason", None)
        if content is None:
            what = "tool calls instead of text" if getattr(message, "tool_calls", None) else "content: null"
            raise BadResponse(
                f"{self.model}: the response has {what} (finish_reason={finish_reason!r})",
                model=self.model,
                attempts=attempts,
            )
        if not isinstance(content, str):  # a list of content parts
            content = "".join(part.get("text", "") if isinstance(part, Mapping) else str(part) for part in content)
        usage = getattr(response, "usage", None)
        input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        estimated = not input_tokens and not output_tokens
        if estimated:
            from workbench.tokens import count_tokens

            input_tokens = count_tokens(messages, "heuristic")
            output_tokens = count_tokens(content, "heuristic")
        if self.prices.given or self.model not in self.gateway.unknown_cost_models:
            cost = call_cost(
                load_litellm(),
                self.model,
                response,
                input_tokens,
                output_tokens,
                estimated=estimated,
                prices=self.prices,
            )
        else:  # the local price map does not change: a model it lacked once, it lacks again
            cost = None
        if cost is None:
            self.gateway.note_unknown_cost(self.model)
        return Completion(
            text=content,
            model=self.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=cost,
            cache_hit=False,
            finish_reason=finish_reason,
            duration_s=duration,
            attempts=attempts,
        )

    def _store(self, request: _Request, completion: Completion) -> None:
        """Count the call, and cache its answer unless no caller can use it (`CacheEntry.usable`):
        an empty answer or a refusal is paid for but asked again next time, not replayed forever."""
        self.gateway.count(calls=1, cost_usd=completion.cost_usd or 0.0)
        if not request.use_cache:
            return
        entry = CacheEntry(
            text=completion.text,
            input_tokens=completion.input_tokens,
            output_tokens=completion.output_tokens,
            cost_usd=completion.cost_usd,
            finish_reason=completion.finish_reason,
            duration_s=completion.duration_s,
        )
        if not request.usable(entry):
            log.info("%s: not caching an unusable answer (finish_reason=%r)", self.model, completion.finish_reason)
            return
        try:
            self.gateway.cache.put(
                request.key, self.model, request.material_json, entry, replace=request.stored_rejected
            )
        except Exception as exc:
            log.warning("could not store a response of %s in the cache: %s", self.model, redact(str(exc)))

    def _failed(self, error: LLMError, attempt: int) -> LLMError:
        error.attempts = attempt
        error.model = self.model
        error.api_base = error.api_base or self.api_base
        self.gateway.count(failures=1)
        text = error.args[0] if error.args else str(error)
        if attempt > 1 and "attempt" not in text:
            error.args = (f"{text} (after {attempt} attempts)",)
        return error

    def _lookup(self, request: _Request) -> Completion | None:
        if not request.use_cache:
            return None
        entry = self.gateway.cache.get(request.key)
        if entry is None or not request.served(entry):
            return None
        self.gateway.count(cache_hits=1)
        return self._hit(entry)

    def _shared(self, flight: Flight) -> Completion | None:
        """The result of an identical call that was in flight (a hit), its error (raised), or None (retry)."""
        if flight.result is not None:
            self.gateway.count(cache_hits=1)
            return replace(flight.result, cache_hit=True, attempts=0)
        if isinstance(flight.error, LLMError):
            raise copy.copy(flight.error)
        return None  # the leader was cancelled or crashed: make the call ourselves

    # -- one call, written once --

    def _plan(self, request: _Request, *, looked_up: bool, repeated: bool = False) -> _Plan:
        """A call from cache lookup to stored answer; yields the steps that block to its driver.

        `looked_up`: the caller asked the cache already (a batch's one query). `repeated`: the batch
        holds the same request more than once, so the plan asks the cache again once it leads the
        key's flight, as an identical call of the batch may have landed since (only then: a lookup
        per call would slow every uncached batch).
        """
        if not looked_up:
            hit = self._lookup(request)
            if hit is not None:
                return hit
        flight: Flight | None = None
        if request.use_cache:
            while True:
                flight, leader = self.gateway.join_flight(request.key)
                if leader:
                    break
                yield _Wait(flight)
                shared = self._shared(flight)
                if shared is not None:
                    return shared
        try:
            if repeated and flight is not None:
                hit = self._lookup(request)
                if hit is not None:
                    self.gateway.land(request.key, flight, result=hit)
                    return hit
            completion = yield from self._attempts(request)
        except BaseException as exc:
            if flight is not None:
                self.gateway.land(request.key, flight, error=exc)
            raise
        self._store(request, completion)
        if flight is not None:
            self.gateway.land(request.key, flight, result=completion)
        return completion

    def _needs_openai_key(self) -> bool:
        """True for an OpenAI model with no key from its options, LiteLLM or `OPENAI_API_KEY`.

        The OpenAI SDK refuses to send such a request; LiteLLM's own HTTP transport, which the
        gateway selects (`workbench.offline.LITELLM_DEFAULTS`), would send it without credentials.
        The gateway keeps the SDK's answer: the call fails at once and nothing is sent.
        """
        if self._transport.get("api_key") or os.environ.get("OPENAI_API_KEY"):
            return False
        litellm = load_litellm()
        return self._provider_name() == "openai" and not (litellm.api_key or litellm.openai_key)

    def _provider_name(self) -> str:
        """LiteLLM's provider for this model and endpoint ("" when LiteLLM cannot tell), asked once."""
        if self._provider is None:
            try:
                self._provider = str(load_litellm().get_llm_provider(self.model, api_base=self.api_base)[1])
            except Exception:  # LiteLLM will say what is wrong with the model when it is called
                self._provider = ""
        return self._provider

    def _send_kwargs(self, request: _Request) -> dict[str, Any]:
        """The request's LiteLLM arguments, with the gateway's connection pool where LiteLLM's HTTP
        transport takes it (`workbench.llm.transport`)."""
        if lends_client(self._provider_name()):
            return {**request.kwargs, "client": self.gateway.http_client()}
        return request.kwargs

    def _send(self, request: _Request) -> tuple[Any, float]:
        """One attempt through LiteLLM: (its response, seconds). Both drivers send this way, the
        asyncio one from the gateway's sender threads: LiteLLM's `acompletion` does its own work
        before and after the request (logging, cost, metadata: several milliseconds a call) in the
        event loop's one thread, which caps a batch at about two thirds of the throughput threads
        reach. A cancelled asyncio caller stops waiting at once; its request ends within `timeout`."""
        litellm = load_litellm()
        kwargs = self._send_kwargs(request)
        with on_the_wire(self.limiter) if "client" in kwargs else self.limiter:
            self.gateway.count(requests=1)
            started = time.perf_counter()
            response = litellm.completion(**kwargs)
            return response, time.perf_counter() - started

    def _answer_in_process(self, request: _Request) -> tuple[OfflineAnswer, float]:
        """One attempt of an `in_process` model: (its answer, seconds)."""
        self.gateway.count(requests=1)
        started = time.perf_counter()
        answer = offline_answer(request.kwargs["messages"], request.kwargs)
        return answer, time.perf_counter() - started

    def _attempts(self, request: _Request) -> _Plan:
        if not self.in_process and self._needs_openai_key():
            raise self._failed(missing_key(self.model, self.api_base), 1)
        attempt = 0
        while True:
            attempt += 1
            try:
                response, duration = yield _Attempt(request)
                return self._parse(response, request.kwargs["messages"], duration, attempt)
            except Exception as exc:
                error = classify(exc, model=self.model, attempts=attempt, secrets=self._secrets, api_base=self.api_base)
            if self.gateway.retry.gives_up(error, attempt, self.max_attempts):
                raise self._failed(error, attempt) from None
            self.gateway.count(retries=1)
            delay = self.gateway.retry.delay(attempt, error)
            log.info("%s: %s; retry %d in %.2fs", self.model, type(error).__name__, attempt, delay)
            yield _Sleep(delay)

    def _run(self, plan: _Plan) -> Completion:
        """The synchronous driver."""
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = plan.send(value) if error is None else plan.throw(error)
            except StopIteration as done:
                return cast("Completion", done.value)
            value = error = None
            try:
                if isinstance(step, _Attempt) and self.in_process:
                    value = self._answer_in_process(step.request)
                elif isinstance(step, _Attempt):
                    value = self._send(step.request)
                elif isinstance(step, _Wait):
                    step.flight.wait()
                else:
                    time.sleep(step.seconds)
            except BaseException as exc:
                error = exc

    async def _arun(self, plan: _Plan) -> Completion:
        """The asynchronous driver (a cancellation is thrown into the plan like any failure)."""
        value: Any = None
        error: BaseException | None = None
        guard = self.timeout * 1.5 + 5.0  # in case the transport ignores the timeout
        while True:
            try:
                step = plan.send(value) if error is None else plan.throw(error)
            except StopIteration as done:
                return cast("Completion", done.value)
            value = error = None
            try:
                if isinstance(step, _Attempt) and self.in_process:
                    value = self._answer_in_process(step.request)
                elif isinstance(step, _Attempt):
                    sending = asyncio.get_running_loop().run_in_executor(
                        self.gateway.senders(), self._send, step.request
                    )
                    value = await asyncio.wait_for(sending, guard)
                elif isinstance(step, _Wait):
                    await step.flight.wait_async()
                else:
                    await asyncio.sleep(step.seconds)
            except BaseException as exc:
                error = exc

    # -- public calls --

    def complete(
        self,
        messages: Sequence[Any],
        *,
        purpose: str = "summary",
        max_tokens: int | None = None,
        repeat: int | None = None,
        validate: Validator | None = None,
    ) -> Completion:
        """Answer `messages` (from the cache when possible); raises an `LLMError` when it fails for good.

        `purpose` ("summary", "probe", "judge", ...) is for logs only: it is not sent, nor part of
        the cache key. `repeat` overrides the bound `repeat` option (the sample number).
        """
        return self._run(self._plan(self._request(messages, max_tokens, repeat, validate), looked_up=False))

    async def acomplete(
        self,
        messages: Sequence[Any],
        *,
        purpose: str = "summary",
        max_tokens: int | None = None,
        repeat: int | None = None,
        validate: Validator | None = None,
    ) -> Completion:
        """`complete` for asyncio: the same cache, limits and retries; the request is sent from one of the
        gateway's threads (see `_send`), so the event loop is never blocked."""
        return await self._arun(self._plan(self._request(messages, max_tokens, repeat, validate), looked_up=False))

    def _prefetch(
        self,
        batch: Sequence[Sequence[Any]],
        max_tokens: int | None,
        repeat: int | None,
        validate: Validator | None = None,
    ) -> tuple[list[_Request], list[Completion | None]]:
        """Build the requests and answer the cached ones with one cache query."""
        requests = [self._request(messages, max_tokens, repeat, validate) for messages in batch]
        hits: list[Completion | None] = [None] * len(requests)
        keys = [r.key for r in requests if r.use_cache]
        if keys:
            found = self.gateway.cache.get_many(keys)
            for index, request in enumerate(requests):
                entry = found.get(request.key) if request.use_cache else None
                if entry is not None and request.served(entry):
                    hits[index] = self._hit(entry)
            count = sum(hit is not None for hit in hits)
            if count:
                self.gateway.count(cache_hits=count)
        return requests, hits

    async def acomplete_many(
        self,
        batch: Sequence[Sequence[Any]],
        *,
        purpose: str = "summary",
        max_tokens: int | None = None,
        repeat: int | None = None,
        return_exceptions: bool = False,
        validate: Validator | None = None,
    ) -> list[Any]:
        """Answer every message list concurrently (bounded by the model's limiter); results in input order.

        The cache is asked once for the whole batch; only the misses reach the model.
        """
        requests, hits = self._prefetch(batch, max_tokens, repeat, validate)
        repeated = _repeated_keys(requests)

        async def answer(index: int) -> Completion:
            hit = hits[index]
            if hit is not None:
                return hit
            request = requests[index]
            return await self._arun(self._plan(request, looked_up=True, repeated=request.key in repeated))

        return list(
            await asyncio.gather(*(answer(i) for i in range(len(requests))), return_exceptions=return_exceptions)
        )

    def complete_many(
        self,
        batch: Sequence[Sequence[Any]],
        *,
        purpose: str = "summary",
        max_tokens: int | None = None,
        repeat: int | None = None,
        max_workers: int | None = None,
        validate: Validator | None = None,
    ) -> list[Completion]:
        """The synchronous path from a pool of threads; results in input order (the first error is raised)."""
        requests, hits = self._prefetch(batch, max_tokens, repeat, validate)
        misses = [i for i, hit in enumerate(hits) if hit is None]
        if misses:
            from concurrent.futures import ThreadPoolExecutor

            workers = max_workers or max(1, min(len(misses), self.limiter.limit))
            with ThreadPoolExecutor(workers, thread_name_prefix="llm") as pool:
                repeated = _repeated_keys(requests)
                answers = pool.map(
                    lambda i: self._run(self._plan(requests[i], looked_up=True, repeated=requests[i].key in repeated)),
                    misses,
                )
                for index, completion in zip(misses, answers, strict=True):
                    hits[index] = completion
        return [hit for hit in hits if hit is not None]
