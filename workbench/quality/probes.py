"""Probes: questions whose answer a good compaction keeps within the agent's reach.

Two sources, each probe asked at one call (the messages sent at that call are what it is asked
against):
- the session's own probes (`session.probes`, e.g. the planted facts of the sample datasets),
  asked at the last replayed call when they apply by then (`from_call` <= that call): by the end
  every compaction has had its chance to lose them;
- probes generated from needed facts: for each compaction, up to `GENERATED_PER_COMPACTION` of the
  removed facts the recording uses again, asked at the call that next uses them. The question
  quotes the passage the fact came from with every occurrence of the fact blanked out (a cloze:
  in any case, also inside a longer name), so it can be answered only by a context that kept the
  fact.

`probe_answerable` (offline) is the share of probes whose expected answer appears in the context
at their call (normalised like facts). `probe_accuracy` (needs the config's `evaluator` model)
is the share the model answers correctly from that context, scored `numeric` when the expected
answer is a number (a number standing alone in the reply, not inside a word, identifier, path or
version, equal within 1e-6 relative), otherwise `contains` (the normalised expected answer within
the normalised reply; an exact reply is a special case). The model is sent that context whole,
as the agent saw it, cut only beyond what it can take; a probe whose answer falls in such a cut
is left unscored (see `model_answers`), and an answer it cannot give (empty) fails the evaluator.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from workbench.quality.evaluator import Transcript, ask, evaluator_model, missing_evaluator, transcript_budget
from workbench.quality.facts import Fact, normalize_text
from workbench.quality.index import FactIndex, session_index
from workbench.quality.retention import CompactionFacts, analyse
from workbench.quality.trace import context_at, memo, session_of
from workbench.registry import register_metric
from workbench.session import Message

GENERATED_PER_COMPACTION = 3
MAX_GENERATED = 60
PASSAGE_CHARS = 90
KIND_LABELS = {
    "path": "file path",
    "identifier": "identifier",
    "number": "number",
    "url": "URL or host",
    "error": "error",
    "commit": "commit hash",
    "command": "command",
    "constraint": "instruction",
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
#: A number standing alone in a reply: not part of a word, an identifier, a path or a version.
_STANDALONE_NUMBER = re.compile(r"(?<![\w./\\-])-?\d+(?:\.\d+)?(?![\w/\\]|\.\w)")


@dataclass(frozen=True)
class AskedProbe:
    """A probe and the call it is asked at; `source` is `session` or `generated`; `event_index` is the
    compaction a generated probe comes from (None for session probes)."""

    question: str
    expected: str
    kind: str
    call_index: int
    source: str
    event_index: int | None = None


_BLANK = "\ue000"  # stands for an occurrence of the answer until the passage is cut out


def _occurrences(fact_text: str) -> re.Pattern[str]:
    """The fact's text in any case, any run of whitespace standing for its spaces."""
    return re.compile(r"\s+".join(map(re.escape, fact_text.split())), re.IGNORECASE)


def _cloze(fact: Fact, source: Message) -> str:
    """A question quoting the passage of `source` around the fact with every occurrence of the fact
    blanked out (in any case, also inside a longer word), so the question never gives its answer."""
    label = KIND_LABELS.get(fact.kind, "detail")
    unknown = f"Earlier in this session a {label} was mentioned in a {source.role} message. Which {label} was it?"
    if not fact.text.strip():
        return unknown
    pattern = _occurrences(fact.text)
    text = source.text.replace(_BLANK, "")
    first = pattern.search(text)
    if first is None:
        text = "\n".join([text, *(c.arguments.replace(_BLANK, "") for c in source.tool_calls)])
        first = pattern.search(text)
        if first is None:
            return unknown
    after = _blanked(pattern, text, first.end(), PASSAGE_CHARS, len("".join(fact.text.split())))
    passage = " ".join(f"{text[max(0, first.start() - PASSAGE_CHARS) : first.start()]}{_BLANK}{after}".split())
    blanks = passage.count(_BLANK)
    notes = [f"each _____ stands for the same {label}"] if blanks > 1 else []
    if re.search(rf"\w{_BLANK}|{_BLANK}\w", passage):
        notes.append(f"the {label} may be part of a longer name")
    detail = "; ".join(notes)
    shown = (
        f"with one {label} blanked out"
        + (" wherever it appears" if blanks > 1 else "")
        + (f" ({detail})" if detail else "")
    )
    quoted = f"...{passage.replace(_BLANK, '_____')}..."
    if pattern.search(quoted):  # the blanks' underscores or the quote's dots completed the answer beside them
        return unknown
    return (
        f'Earlier in this session a {source.role} message contained this passage, {shown}: "{quoted}". '
        f"What is the missing {label}? Answer with the {label} only."
    )


def _blanked(pattern: re.Pattern[str], text: str, start: int, limit: int, letters: int) -> str:
    """`pattern.sub(_BLANK, text[start:])[:limit]`, reading the text no further than that needs.

    The text is read in growing windows. A window's occurrences are the text's as far as no
    occurrence runs past the window's end, and none can start before a point from which the
    window still holds more non-space characters than an occurrence has (`letters`, its words'
    length; an occurrence of a pattern of `_occurrences` is its words with whitespace between)."""
    size = 2 * (limit + letters) + 64
    while True:
        end = min(len(text), start + size)
        pieces: list[str] = []
        produced, at = 0, start
        for match in pattern.finditer(text, start, end):
            if produced + match.start() - at >= limit:
                break
            pieces += (text[at : match.start()], _BLANK)
            produced += match.start() - at + 1
            at = match.end()
            if produced >= limit:
                break
        reached = at + max(0, limit - produced)  # where the text that gives the `limit`-th character ends
        if end == len(text) or (reached <= end and len("".join(text[reached:end].split())) > letters):
            pieces.append(text[at:reached])
            return "".join(pieces)[:limit]
        size *= 4


def asked_probes(result: Any) -> list[AskedProbe]:
    """Every probe of a replay result with the call it is asked at (memoised per result)."""

    def compute() -> list[AskedProbe]:
        session = session_of(result)
        probes: list[AskedProbe] = []
        if result.calls:
            last = result.calls[-1].index
            probes += [
                AskedProbe(p.question, p.expected, p.kind, last, "session")
                for p in session.probes
                if p.from_call <= last
            ]
        analyses = analyse(result).compactions
        if analyses:  # a replay that compacted nothing reads no fact
            probes += _generated(session_index(session), analyses, len(result.calls))
        return probes

    found: list[AskedProbe] = memo(result, "quality_probes", compute)
    return found


def _generated(index: FactIndex, analyses: Sequence[CompactionFacts], replayed: int) -> list[AskedProbe]:
    """The probes generated from the needed facts each compaction removed, asked at their next use
    (at most `GENERATED_PER_COMPACTION` per compaction, `MAX_GENERATED` in all, before call `replayed`)."""
    probes: list[AskedProbe] = []
    for analysis in analyses:
        for key in _earliest_needed(analysis, index, GENERATED_PER_COMPACTION):
            call = _next_use(index, key, analysis.call_index)
            if call is None or call >= replayed or len(probes) >= MAX_GENERATED:
                continue
            fact, source = analysis.first_mention(key)
            probes.append(
                AskedProbe(_question(index, fact, source), fact.text, "recall", call, "generated", analysis.event_index)
            )
    return probes


def _question(index: FactIndex, fact: Fact, source: Message) -> str:
    """`_cloze(fact, source)`, kept per recorded source message in the session's index: the next
    configuration of a grid asks about the same facts."""
    if not index.owns(source):
        return _cloze(fact, source)
    questions: dict[tuple[int, str], str] = memo(index, "probe_questions", dict)
    found = questions.get((id(source), fact.key))
    if found is None:
        found = questions[(id(source), fact.key)] = _cloze(fact, source)
    return found


def _earliest_needed(analysis: CompactionFacts, index: FactIndex, limit: int) -> list[str]:
    """The keys of the first `limit` needed non-constraint facts by (last use, key)."""
    wanted = analysis.needed_mask & ~analysis.constraint_mask
    keys: list[str] = []
    layers = index.last_used_at
    for call in range(max(0, analysis.call_index), len(layers)):
        if not wanted or len(keys) >= limit:
            break
        layer = wanted & layers[call]
        if layer:
            for key, position in index.layer_keys(call):
                if (layer >> position) & 1:
                    keys.append(key)
                    if len(keys) == limit:
                        break
            wanted ^= layer
    return keys


def _next_use(index: FactIndex, key: str, from_call: int) -> int | None:
    """The first call at or after `from_call` whose assistant message states `key` (kept per session)."""
    position = index.bits.get(key)
    if position is None:
        return None
    found: dict[tuple[int, int], int | None] = memo(index, "next_use", dict)
    if (position, from_call) not in found:
        replies = index.replies
        found[(position, from_call)] = next(
            (call for call in range(max(0, from_call), len(replies)) if (replies[call] >> position) & 1), None
        )
    return found[(position, from_call)]


def _contexts_by_call(result: Any, probes: Sequence[AskedProbe]) -> dict[int, list[Message]]:
    return {call: context_at(result, call) for call in sorted({p.call_index for p in probes})}


def answerable(result: Any) -> list[bool]:
    """For each asked probe: its expected answer appears in a message of the context at its call
    (normalised texts, memoised).

    The recorded messages that hold an answer are found once per session (`FactIndex.holders`), so
    a context holds the answer when it shares a message with them; only the messages compactions
    wrote are searched, each distinct text once."""

    def compute() -> list[bool]:
        probes = asked_probes(result)
        flags = [False] * len(probes)
        by_call: dict[int, list[tuple[int, str]]] = {}
        for position, probe in enumerate(probes):
            wanted = normalize_text(probe.expected)
            if wanted:
                by_call.setdefault(probe.call_index, []).append((position, wanted))
        if by_call:
            index = session_index(session_of(result))
            seen = index.seen_texts()
            for call in sorted(by_call):
                context = context_at(result, call)
                written: set[str] | None = None
                for position, wanted in by_call[call]:
                    if not index.holders(wanted).isdisjoint(map(id, context)):
                        flags[position] = True
                        continue
                    if written is None:
                        written = set(index.texts(index.foreign(context), seen))
                    flags[position] = any(wanted in text for text in written)
        return flags

    found: list[bool] = memo(result, "quality_answerable", compute)
    return found


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _by_event(result: Any, values: Sequence[float | None], name: str) -> list[dict[str, Any]]:
    probes = asked_probes(result)
    rows: list[dict[str, Any]] = []
    for index in range(len(result.compactions)):
        mine = [v for p, v in zip(probes, values, strict=True) if p.event_index == index and v is not None]
        rows.append({name: _mean(mine)})
    return rows


@register_metric("probe_answerable", direction="higher", unit="share", level="run")
class ProbeAnswerable:
    """Share of the session's probes (at the last call) and of the probes generated from needed
    facts (at their next use) whose expected answer is in the context sent at that call."""

    requires_model: ClassVar[bool] = False
    reusable: ClassVar[bool] = True

    def compute(self, result: Any) -> float | None:
        return _mean([1.0 if ok else 0.0 for ok in answerable(result)])

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        return _by_event(result, [1.0 if ok else 0.0 for ok in answerable(result)], "probe_answerable")


# -- asked to a model ---------------------------------------------------------------------------

SYSTEM = (
    "You are being tested on what you remember of a coding-agent session. Everything you know about "
    "the session is in the transcript you are given. Answer the question from that transcript only, "
    "as briefly as possible: the answer itself, with no explanation. If the transcript does not hold "
    "the answer, reply exactly: UNKNOWN"
)


def scoring_mode(expected: str) -> str:
    return "numeric" if _NUMBER.fullmatch(expected.strip().replace(",", "")) else "contains"


def score_answer(expected: str, answer: str) -> float:
    """1.0 when `answer` gives `expected` (numeric or contains scoring, see the module docstring), else 0.0."""
    if scoring_mode(expected) == "numeric":
        target = float(expected.strip().replace(",", ""))
        for found in _STANDALONE_NUMBER.findall(answer.replace(",", "")):
            if abs(float(found) - target) <= 1e-6 * max(1.0, abs(target)):
                return 1.0
        return 0.0
    wanted = normalize_text(expected).strip()
    return 1.0 if wanted and wanted in normalize_text(answer) else 0.0


def model_answers(result: Any) -> list[float | None] | None:
    """For each asked probe: 1.0/0.0 as the evaluator model answered it, None when it was left
    unscored; None without an evaluator.

    The model is sent the context at the probe's call whole, cut only beyond what it can take
    (`evaluator.transcript_budget`). A probe whose answer is in that context but fell in the cut
    is not asked: it is left unscored (a warning says how many), not scored as a wrong answer."""

    def compute() -> list[float | None] | None:
        model = evaluator_model(result)
        if model is None:
            return None
        probes = asked_probes(result)
        budget = transcript_budget(result)
        sent = {call: Transcript.of(messages, budget) for call, messages in _contexts_by_call(result, probes).items()}
        asked = [i for i, p in enumerate(probes) if not sent[p.call_index].hides(p.expected)]
        batch = [
            [
                {"role": "system", "content": SYSTEM},
                {
                    "role": "user",
                    "content": f"<transcript>\n{sent[probes[i].call_index].text}\n</transcript>\n\n"
                    f"Question: {probes[i].question}",
                },
            ]
            for i in asked
        ]
        labels = [f"probe {i + 1} of {len(probes)} (call {probes[i].call_index})" for i in asked]
        completions = ask(result, model, batch, "probe", labels=labels)
        scores: list[float | None] = [None] * len(probes)
        for i, completion in zip(asked, completions, strict=True):
            scores[i] = score_answer(probes[i].expected, completion.text)
        unscored = len(probes) - len(asked)
        if unscored:
            warnings.warn(
                f"probe_accuracy: {unscored} of {len(probes)} probes left unscored: their answer is in the "
                f"context at their call, but in the part of the transcript cut to fit the evaluator "
                f"{getattr(result.config, 'evaluator', None)!r} ({budget:,} characters)",
                RuntimeWarning,
                stacklevel=2,
            )
        return scores

    found: list[float | None] | None = memo(result, "quality_probe_answers", compute)
    return found


def _scored(scores: Sequence[float | None]) -> list[float]:
    return [s for s in scores if s is not None]


@register_metric("probe_accuracy", direction="higher", unit="share", level="run")
class ProbeAccuracy:
    """Share of the probes the config's `evaluator` model answers correctly from the context at
    their call (numeric or contains scoring), over the probes it could be asked; None without an
    evaluator."""

    requires_model: ClassVar[bool] = True

    def unavailable(self, result: Any) -> str | None:
        return missing_evaluator(result)

    def compute(self, result: Any) -> float | None:
        scores = model_answers(result)
        return None if scores is None else _mean(_scored(scores))

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        scores = model_answers(result)
        if scores is None:
            return [{"probe_accuracy": None} for _ in result.compactions]
        return _by_event(result, scores, "probe_accuracy")
