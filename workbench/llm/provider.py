"""LiteLLM, loaded once by the gateway, with the offline `workbench/extractive` provider registered.

`load_litellm()` imports LiteLLM the first time the gateway needs it (never on `import
workbench`), with its offline defaults in place (`workbench.offline.import_litellm`: only the
variables the user left unset), quiets it, and registers the workbench's custom provider.

It then moves everything the import made (about 300,000 objects, mostly LiteLLM's price map) out
of the garbage collector's reach with `gc.freeze()`. They live as long as the process, and every
full collection would otherwise walk them again: about 170 ms, during which no thread runs (in an
experiment, every cell waiting to send its request).

The provider: in this LiteLLM (1.10x) a custom provider is an entry `{"provider": name,
"custom_handler": CustomLLM instance}` in `litellm.custom_provider_map`; LiteLLM's
`custom_llm_setup()` (run at the start of every completion call) copies the names into
`litellm.provider_list` and `litellm._custom_providers`, and the handler is called with the
model name without its `workbench/` prefix. The summary itself is `workbench.extractive`'s.

The answer (text and usage) is made in one place, `offline_answer`: the handler wraps it in a
`ModelResponse`, and the gateway calls it directly for `workbench/extractive`
(`BoundModel.in_process`), sparing each call LiteLLM's per-call machinery (milliseconds a remote
model hides behind its latency); other models, remote or local, go through LiteLLM.
"""

from __future__ import annotations

import atexit
import gc
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbench import extractive
from workbench.offline import import_litellm

__all__ = ["PROVIDER", "OfflineAnswer", "handler_class", "load_litellm", "offline_answer", "register"]

log = logging.getLogger("workbench.llm")

PROVIDER = extractive.PROVIDER

_HANDLER_CLASSES: dict[int, type] = {}
_HANDLERS: dict[int, Any] = {}
_litellm_lock = threading.Lock()
_litellm: Any = None


def _budget(optional_params: Mapping[str, Any] | None) -> int | None:
    """`max_tokens` when given; None lets the summarizer use the length the request states, else its default."""
    params = optional_params or {}
    for name in ("max_tokens", "max_completion_tokens"):
        value = params.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return None


@dataclass(frozen=True)
class OfflineAnswer:
    """What `workbench/extractive` answers a request: the summary and its usage (counted len/4, as
    `extractive.request_tokens` and `extractive.heuristic_tokens` count)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = "stop"


def offline_answer(messages: Sequence[Mapping[str, Any]], optional_params: Mapping[str, Any] | None) -> OfflineAnswer:
    """The answer of `workbench/extractive` to `messages` under the request's parameters.

    The one place it is made: the LiteLLM handler wraps it in a `ModelResponse`, and the gateway
    calls it in-process (`BoundModel.in_process`), so both paths answer alike."""
    text = extractive.extractive_summary(messages, budget_tokens=_budget(optional_params))
    return OfflineAnswer(text, extractive.request_tokens(messages), extractive.heuristic_tokens(text))


def handler_class(litellm_module: Any = None) -> type:
    """The `litellm.CustomLLM` subclass serving `workbench/extractive` (created on first use)."""
    litellm = litellm_module if litellm_module is not None else import_litellm()
    cached = _HANDLER_CLASSES.get(id(litellm))
    if cached is not None:
        return cached

    class ExtractiveLLM(litellm.CustomLLM):  # type: ignore[name-defined]  # a base class known only at run time
        """`workbench/extractive`: answers every request with `extractive_summary` of its messages."""

        def _respond(
            self, model: str, messages: list[dict[str, Any]], optional_params: Mapping[str, Any] | None
        ) -> Any:
            name = model.split("/", 1)[1] if model.startswith(f"{PROVIDER}/") else model
            if name != extractive.MODEL:
                from litellm.llms.custom_llm import CustomLLMError

                raise CustomLLMError(
                    status_code=404,
                    message=(
                        f"unknown model {PROVIDER}/{name}; the workbench provider serves only {extractive.MODEL_STRING}"
                    ),
                )
            answer = offline_answer(messages, optional_params)
            return litellm.ModelResponse(
                id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
                created=int(time.time()),
                model=extractive.MODEL_STRING,
                object="chat.completion",
                choices=[
                    {
                        "index": 0,
                        "finish_reason": answer.finish_reason,
                        "message": {"role": "assistant", "content": answer.text},
                    }
                ],
                usage=litellm.Usage(
                    prompt_tokens=answer.prompt_tokens,
                    completion_tokens=answer.completion_tokens,
                    total_tokens=answer.prompt_tokens + answer.completion_tokens,
                ),
            )

        def completion(self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            return self._respond(model, messages, kwargs.get("optional_params"))

        async def acompletion(self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            return self._respond(model, messages, kwargs.get("optional_params"))

        def _chunk(self, model: str, messages: list[dict[str, Any]], optional_params: Any) -> dict[str, Any]:
            response = self._respond(model, messages, optional_params)
            usage = response.usage
            return {
                "text": response.choices[0].message.content,
                "is_finished": True,
                "finish_reason": "stop",
                "index": 0,
                "tool_use": None,
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                },
            }

        def streaming(self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            yield self._chunk(model, messages, kwargs.get("optional_params"))

        async def astreaming(self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            yield self._chunk(model, messages, kwargs.get("optional_params"))

    _HANDLER_CLASSES[id(litellm)] = ExtractiveLLM
    return ExtractiveLLM


def register(litellm_module: Any = None) -> Any:
    """Make `workbench/extractive` callable through `litellm.completion`; returns the handler.

    Idempotent: an existing `workbench` entry is left in place. Runs `custom_llm_setup()` once
    itself, so provider lookups made outside a completion call (`litellm.get_llm_provider`)
    see the provider at once.
    """
    litellm = litellm_module if litellm_module is not None else import_litellm()
    provider_map = getattr(litellm, "custom_provider_map", None)
    if provider_map is None:
        provider_map = []
        litellm.custom_provider_map = provider_map
    for item in provider_map:
        if item.get("provider") == PROVIDER:
            return item.get("custom_handler")
    handler = _HANDLERS.get(id(litellm))
    if handler is None:
        handler = handler_class(litellm)()
        _HANDLERS[id(litellm)] = handler
    provider_map.append({"provider": PROVIDER, "custom_handler": handler})
    setup = getattr(getattr(litellm, "utils", None), "custom_llm_setup", None)
    if callable(setup):
        setup()
    return handler


def load_litellm() -> Any:
    """Import LiteLLM once (slow: seconds), quiet it, and register the offline `workbench/` provider."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _litellm_lock:
        if _litellm is None:
            litellm = import_litellm()
            litellm.suppress_debug_info = True
            if hasattr(litellm, "telemetry"):
                litellm.telemetry = False
            try:
                register(litellm)
            except Exception as exc:
                log.warning("offline provider %s could not be registered: %s", extractive.MODEL_STRING, exc)
            gc.collect()  # what the import left as garbage is freed, not frozen
            gc.freeze()
            atexit.register(gc.unfreeze)  # the exit's own collection then sees them (DuckDB's bindings check it)
            _litellm = litellm
    return _litellm
