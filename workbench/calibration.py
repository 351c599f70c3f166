"""Calibrating replayed token counts against what the provider billed.

Transcripts lack the agent's system prompt and tool schemas, and the workbench's tokenizers are
not the provider's, so replayed context tokens run well below the input the provider recorded for
the same call. `fit_recorded` fits, per session, `recorded ≈ overhead + scale × text tokens +
framing` on the calls that both carry recorded usage and precede the agent's first own compaction
(after it, the recorded context is the agent's compacted one, not the full history a no-compaction
replay sends). The fit is least squares with a trim of outliers, and its quality is the median
absolute relative error before and after calibration.

The engine applies a fit by counting with a `ScaledTokenizer` (text tokens × scale; the fixed
per-message framing and image estimates stay as they are) and adding `overhead` once per call, as
a hidden preamble — so triggers, strategies, metrics and billing all see calibrated counts.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.session import Message, Session, recorded_input_tokens
from workbench.tokens import IMAGE_TOKENS, MESSAGE_OVERHEAD, Tokenizer, image_parts, message_tokens, prime, resolve

CALIBRATIONS = ("none", "recorded")
#: A point whose relative residual exceeds this multiple of the median residual (and 2 %) is an outlier.
OUTLIER_FACTOR = 3.0
OUTLIER_FLOOR = 0.02
#: Below this many points (or with no spread in the replayed counts) only the overhead is fitted.
MIN_POINTS_FOR_SCALE = 3


@dataclass(frozen=True)
class CalibrationFit:
    """A per-session calibration: calibrated = overhead + scale × text tokens + framing.

    `calls_used` points fitted (of `calls_with_usage` recorded calls before the first recorded
    compaction; `outliers` were left out). `raw_ratio` is the median replayed / recorded ratio
    before calibration; `error_before` / `error_after` the median absolute relative error between
    replayed and recorded input tokens on those calls, without and with the fit. With no usable
    call the fit is the identity and `note` says why.
    """

    tokenizer: str
    overhead: int
    scale: float
    calls_used: int
    calls_with_usage: int
    outliers: int
    raw_ratio: float | None
    error_before: float | None
    error_after: float | None
    note: str = ""

    @property
    def identity(self) -> bool:
        return self.overhead == 0 and self.scale == 1.0

    def describe(self) -> str:
        """One line: the fit and its error (what `workbench replay` prints under a calibrated config)."""
        if self.identity and self.note:
            return f"calibration: none applied ({self.note})"
        errors = ""
        if self.error_before is not None and self.error_after is not None:
            errors = (
                f"; median error against the billed input {self.error_before:.1%} raw, "
                f"{self.error_after:.1%} calibrated"
            )
        return (
            f"calibration: {self.overhead:+,} tokens per call, text tokens x {self.scale:.3f} (fitted on "
            f"{self.calls_used} of {self.calls_with_usage} calls with usage, {self.outliers} outliers left out)"
            f"{errors}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokenizer": self.tokenizer,
            "overhead": self.overhead,
            "scale": self.scale,
            "calls_used": self.calls_used,
            "calls_with_usage": self.calls_with_usage,
            "outliers": self.outliers,
            "raw_ratio": self.raw_ratio,
            "error_before": self.error_before,
            "error_after": self.error_after,
            "note": self.note,
        }


class ScaledTokenizer:
    """`base` with every text count multiplied by `scale` (rounded); its own per-message cache key."""

    def __init__(self, base: Tokenizer, scale: float):
        self.base = base
        self.scale = scale
        self.name = f"{base.name}*{scale:.6f}"

    def count(self, text: str) -> int:
        return round(self.scale * self.base.count(text)) if text else 0

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return [round(self.scale * n) for n in self.base.count_batch(texts)]


def _framing(message: Message) -> int:
    """The per-message tokens a tokenizer does not count (framing overhead and image estimates)."""
    return MESSAGE_OVERHEAD + IMAGE_TOKENS * image_parts(message)


def prime_scaled(messages: Iterable[Message], scaled: ScaledTokenizer) -> None:
    """Fill `scaled`'s per-message cache from the base tokenizer's counts (no second tokenization)."""
    messages = list(messages)
    prime(messages, scaled.base)
    base_name, name, scale = scaled.base.name, scaled.name, scaled.scale
    for message in messages:
        cache = message._token_cache
        if name not in cache:
            framing = _framing(message)
            cache[name] = round(scale * (cache[base_name] - framing)) + framing


def schema_text(tools: Sequence[Mapping[str, Any]]) -> str:
    """The text the tool schemas are counted as (compact, stable JSON)."""
    return json.dumps(list(tools), sort_keys=True, separators=(",", ":"), default=str) if tools else ""


def calibration_points(session: Session, tokenizer: str | Tokenizer) -> list[tuple[int, int, int]]:
    """(text tokens, framing tokens, recorded input) of every call with recorded usage before the
    first recorded compaction, for the context a no-compaction replay sends (tool schemas included)."""
    tok = resolve(tokenizer)
    messages = session.messages
    prime(messages, tok)
    recorded = session.recorded_compactions
    first = min((r.call_index for r in recorded), default=None)
    text = tok.count(schema_text(session.tools))
    framing = 0
    call = 0
    points: list[tuple[int, int, int]] = []
    for message in messages:
        if message.role == "assistant":
            if first is not None and call >= first:
                break
            billed = recorded_input_tokens(message)
            if billed:
                points.append((text, framing, billed))
            call += 1
        size = message_tokens(message, tok)
        frame = _framing(message)
        text += size - frame
        framing += frame
    return points


def _line(points: Sequence[tuple[int, int, int]]) -> tuple[float, float]:
    """Least-squares (overhead, scale) for y - framing = overhead + scale × text, overhead >= 0, scale > 0."""
    xs = [float(t) for t, _, _ in points]
    ys = [float(y - f) for _, f, y in points]
    if len(points) >= MIN_POINTS_FOR_SCALE and max(xs) - min(xs) > 0:
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mean_x) ** 2 for x in xs)
        scale = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
        overhead = mean_y - scale * mean_x
        if overhead < 0:
            scale = sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
            overhead = 0.0
        if scale > 0:
            return overhead, scale
    return max(0.0, statistics.median(y - x for x, y in zip(xs, ys, strict=True))), 1.0


def _errors(points: Sequence[tuple[int, int, int]], overhead: float, scale: float) -> list[float]:
    return [abs(overhead + scale * t + f - y) / y for t, f, y in points]


def fit(points: Sequence[tuple[int, int, int]], tokenizer: str = "heuristic") -> CalibrationFit:
    """Fit (overhead, scale) on `points` (see `calibration_points`), refitting without outliers."""
    if not points:
        return CalibrationFit(
            tokenizer=tokenizer,
            overhead=0,
            scale=1.0,
            calls_used=0,
            calls_with_usage=0,
            outliers=0,
            raw_ratio=None,
            error_before=None,
            error_after=None,
            note="no recorded usage before the first recorded compaction: counts left as they are",
        )
    kept = list(points)
    overhead, scale = _line(kept)
    for _ in range(3):
        errors = _errors(points, overhead, scale)
        limit = max(OUTLIER_FACTOR * statistics.median(errors), OUTLIER_FLOOR)
        inliers = [p for p, e in zip(points, errors, strict=True) if e <= limit]
        if len(inliers) == len(kept) or len(inliers) < max(1, len(points) // 2):
            break
        kept = inliers
        overhead, scale = _line(kept)
    rounded = round(overhead)
    return CalibrationFit(
        tokenizer=tokenizer,
        overhead=rounded,
        scale=scale,
        calls_used=len(kept),
        calls_with_usage=len(points),
        outliers=len(points) - len(kept),
        raw_ratio=statistics.median((t + f) / y for t, f, y in points),
        error_before=statistics.median(_errors(points, 0, 1.0)),
        error_after=statistics.median(_errors(points, rounded, scale)),
        note="" if len(kept) >= MIN_POINTS_FOR_SCALE else "too few calls to fit a scale: overhead only",
    )


def fit_recorded(session: Session, tokenizer: str | Tokenizer = "heuristic") -> CalibrationFit:
    """The calibration of `session`'s replayed counts under `tokenizer` against its recorded usage."""
    tok = resolve(tokenizer)
    return fit(calibration_points(session, tok), tok.name)


def calibration_table(sessions: Iterable[Session], tokenizer: str = "heuristic") -> list[dict[str, Any]]:
    """One row per session with recorded usage: session, calls used, raw ratio, error before/after."""
    rows = []
    for session in sessions:
        result = fit_recorded(session, tokenizer)
        if result.calls_with_usage:
            rows.append({"session": session.id, "calls": session.calls, **result.to_dict()})
    return rows


__all__ = [
    "CALIBRATIONS",
    "CalibrationFit",
    "ScaledTokenizer",
    "calibration_points",
    "calibration_table",
    "fit",
    "fit_recorded",
    "prime_scaled",
    "schema_text",
]
