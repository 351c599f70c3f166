"""The one gateway every model call of the workbench goes through (summaries, probe answers, judges).

    from workbench.llm import Gateway
    from workbench.store import DuckDBCache

    gateway = Gateway(DuckDBCache("data/workbench.duckdb"))   # or Gateway() for a MemoryCache
    summarizer = gateway.model("openai/gpt-4o-mini", {"temperature": 0, "concurrency": 16})
    completion = summarizer.complete([{"role": "user", "content": "Summarize: ..."}])
    completion = await summarizer.acomplete(messages)          # the same, from asyncio

Built on LiteLLM (`litellm.completion`), so any provider string works:
`openai/...`, `anthropic/...`, `ollama/...`, an OpenAI-compatible server (`openai/<name>` with
`api_base`), and the offline `workbench/extractive`. LiteLLM is imported on first use, not when
this package is imported; importing it changes no environment variable and no import machinery.

The package, one concern per module:
- `options`: which options are sent, hashed, kept by the gateway, or secret; `redact`;
- `errors`: `LLMError` and its kinds, `classify` (a LiteLLM exception -> one of them);
- `retry`: `RetryPolicy` (what is retried, backoff, `Retry-After`);
- `cache`: cache keys, the `Cache` protocol, `MemoryCache` (the database's, `DuckDBCache`, is the store's);
- `pricing`: the cost of a call;
- `provider`: loading LiteLLM and registering the offline `workbench/extractive` provider;
- `concurrency`: `Limiter` (calls in flight per model and endpoint), `Flight` (identical calls joined);
- `binding`: `BoundModel`, a model bound to its options (the `Summarizer` strategies call), and
  `GatewayAPI`, the protocol of what it uses of its gateway;
- `gateway`: `Gateway` (cache, limiters, calls in flight, retry policy, stats), the default gateway;
- `lazy`: `LazyModel` (bound at first use, its one-time start-up timed apart, for replays).

Options (a config's `summarizer_options`, merged over the gateway's defaults):
- sent to the model and part of the cache key: `temperature`, `max_tokens`, `top_p`, `stop`,
  `seed`, `response_format`, ... (anything not listed below);
- the endpoint, `api_base`/`base_url`: sent, and part of the cache key without its credentials
  (another endpoint may serve another model under the same name);
- transport only, sent but never part of the cache key: `api_version`, `timeout` (seconds per
  attempt; `request_timeout` is an alias), `extra_headers`, `organization`;
- secrets, sent but never part of the cache key, never stored, redacted from error messages:
  `api_key` and any option whose name says key/secret/token/password/credentials;
  `api_key_env` names an environment variable holding the key (so configs never hold keys);
  without either, LiteLLM reads the provider's usual variable (`OPENAI_API_KEY`, ...);
- the gateway's own, never sent: `concurrency` (in-flight calls per model and endpoint, one
  bound shared by threads and event loops), `repeat` (sample number: repeats of the same request
  are cached separately), `num_retries` (retries after the first attempt; `max_retries` is an
  alias), `cache` (False bypasses the cache), `input_cost_per_token` and
  `output_cost_per_token` (your own prices, e.g. for a self-hosted model).
Defaults come from the Gateway's arguments, which default to the environment variables
`WORKBENCH_LLM_TIMEOUT`, `WORKBENCH_LLM_CONCURRENCY` and `WORKBENCH_LLM_NUM_RETRIES`.

Behaviour:
- Cache: a hit returns the stored record (text, tokens, cost and duration of the original call)
  with `cache_hit=True`, `attempts=0`. Errors are never cached, nor are answers no caller can use
  (empty text, `finish_reason == "content_filter"`): they are paid for, and asked again next
  time. Identical requests in flight at the same time are made once (the others wait and receive
  the result as a cache hit, or the same error). `complete_many` / `acomplete_many` ask the cache
  once per batch, make each distinct request once, and return results in input order.
  `DuckDBCache` stores rows shortly after (write-behind): call `Gateway.close()` (or
  `cache.flush()`) before another process reads the table.
- `model`, `messages` and `stream` cannot be set as options (`ConfigError`).
- Retries (the only ones: LiteLLM's and the OpenAI client's are disabled): 429 (waiting at least
  its `Retry-After`), 5xx, timeouts and dropped connections, with exponential backoff and jitter.
  Authentication failures (`AuthenticationFailed`: 401/403, no key) and refused connections or
  unknown hosts (`ConnectionFailed`) fail at once, naming the model and `api_base`; other 4xx
  fail at once too (`ProviderError`). All are `LLMError`s.
- `finish_reason` is reported in the returned `Completion`, not raised: a `length` answer is cached
  (it is what that request, with that `max_tokens`, gets); `CompactionEnv.summarize` rejects a
  `content_filter` one and an empty one (`workbench.compaction.unusable_answer`).
- Usage comes from the response, or is counted with the `heuristic` tokenizer when the provider
  omits it; cost from LiteLLM's (local) price map. Unknown prices give `cost_usd=None` and a
  "cost unknown" warning (once per model, logged, and listed in `Gateway.unknown_cost_models`).
"""

from workbench.llm.binding import BoundModel, GatewayAPI
from workbench.llm.cache import Cache, CacheEntry, MemoryCache, cache_key, key_material
from workbench.llm.concurrency import Flight, Limiter
from workbench.llm.errors import (
    AuthenticationFailed,
    BadResponse,
    ConnectionFailed,
    LLMError,
    ProviderError,
    RateLimited,
    Timeout,
    classify,
)
from workbench.llm.gateway import Gateway, GatewayStats, default_gateway, set_default_gateway
from workbench.llm.lazy import LazyModel, startup_seconds, timer_excluding_startup
from workbench.llm.options import redact, split_options
from workbench.llm.provider import load_litellm
from workbench.llm.retry import RetryPolicy, retry_after_seconds

__all__ = [
    "AuthenticationFailed",
    "BadResponse",
    "BoundModel",
    "Cache",
    "CacheEntry",
    "ConnectionFailed",
    "Flight",
    "Gateway",
    "GatewayAPI",
    "GatewayStats",
    "LLMError",
    "LazyModel",
    "Limiter",
    "MemoryCache",
    "ProviderError",
    "RateLimited",
    "RetryPolicy",
    "Timeout",
    "cache_key",
    "classify",
    "default_gateway",
    "key_material",
    "load_litellm",
    "redact",
    "retry_after_seconds",
    "set_default_gateway",
    "split_options",
    "startup_seconds",
    "timer_excluding_startup",
]
