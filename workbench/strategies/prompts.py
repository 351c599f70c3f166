"""Prompt texts of the summarizing strategies, and how a summarizer request is put together.

Every request has the same shape: a system message holding the instructions (the strategy's
`prompt` parameter, defaulting to one of the texts below) and a user message holding the material,
each piece wrapped in a tag so that both a model and the offline extractive summarizer can tell
instructions from content:

    <existing_summary> ... </existing_summary>     (when an earlier summary is being folded in)
    <transcript> ... </transcript>                 (the messages being condensed)

A custom prompt may instead place the material itself with the placeholders `{existing_summary}`
and `{transcript}`; it is then sent as a single user message with the placeholders filled in
(tags included), and no system message.

The exception is `summarize_full` (001), whose request is the native conversation itself with
`STRUCTURED_PROMPT` (or the custom prompt) appended as the last user message; its prompt
therefore speaks of "the conversation above". `MERGE_PROMPT` is adaptive chunking's request to
merge chunk summaries again (`build_merge_request`).
"""

from __future__ import annotations

from typing import Any

EXISTING_TAG = "existing_summary"
TRANSCRIPT_TAG = "transcript"
EXISTING_PLACEHOLDER = "{existing_summary}"
TRANSCRIPT_PLACEHOLDER = "{transcript}"
NO_EXISTING_SUMMARY = "(none: this is the first time this conversation is condensed)"

STRUCTURED_PROMPT = """\
Stop working on the task for a moment: the conversation above is about to be removed from your \
context, and the summary you write now is all that will remain of it, so that you can keep going \
afterwards. Earlier summaries in the conversation are part of the history: carry their facts \
forward. Write a summary with these seven headed sections, in this order:

1. Goals and constraints: every objective the user stated, with their priorities, limits and \
explicit do's and don'ts, worded as precisely as the user worded them.
2. Timeline: the phases of the work in order: what was asked, what was tried, what worked, what \
failed and why.
3. Technical context and decisions: languages, libraries, tools, commands and versions in play; \
design choices that were made and the reason for each.
4. Files and code: every file path touched or inspected, what it is for, what was changed in it, \
with short code excerpts where the exact text matters.
5. Active work: the task in progress at the end of the conversation, the last action completed, and \
any half-finished change.
6. Open issues: errors not yet fixed, requests not yet started, questions waiting for the user.
7. Next step: the single concrete action to take next, following from the latest request and the \
state of the work.

Copy identifiers, paths, numbers, error messages and commands exactly. Leave out pleasantries and \
anything that no longer matters. Output only the summary."""

PROGRESSIVE_PROMPT = """\
You maintain a running summary of an agent's work. You receive the summary so far inside \
<existing_summary> tags and the messages that happened since inside <transcript> tags. Produce one \
updated summary that merges both: keep every fact from the existing summary that is still true, \
add what the new messages established, and correct anything they overturned.

Keep, exactly as written: decisions and their reasons, file paths, names of functions and \
variables, numbers and settings, commands run and their outcome, errors met and how they were \
resolved, tool results the agent may need again, and tasks still pending.
Be brief but never drop a detail the agent would have to rediscover. Output only the updated \
summary, without introduction."""

SPLIT_PROMPT = """\
The older part of a conversation between a user and a coding agent is given inside <transcript> \
tags; the most recent messages stay in the context as they are and follow your summary. Condense \
the older part into a compact account the agent can rely on instead of it: what the user wants, \
what has been done and found, the decisions taken, the files, identifiers, numbers and errors \
involved, and what was still unfinished. Quote names and values exactly. Output only the summary."""

CHUNK_PROMPT = """\
Below, inside <transcript> tags, is one contiguous stretch of a longer agent conversation; other \
stretches are condensed separately. Summarize only this stretch: the request it served, the \
actions taken and their results, decisions, file paths, identifiers, numbers and errors. Write a \
few dense lines; quote names and values exactly; output only the summary."""

HANDOFF_PROMPT = """\
You are writing a handover note. A different model, which has never seen this conversation, will \
take over the task from here with only the user's own messages and your note. The conversation so \
far is inside <transcript> tags (any earlier note inside <existing_summary> tags).

Write the note so the new model can resume without asking anything:
- the task and the outcome the user expects;
- what has been done so far and what it revealed, including commands run and their results;
- the current state of every file that was created or changed, by exact path;
- decisions already made and constraints to respect, with reasons;
- problems still open, and mistakes or dead ends not to repeat;
- the precise next actions, in order.
Address the new model directly. Be concrete and exact with names, paths and values. Output only \
the note."""

MERGE_PROMPT = """\
Each <existing_summary> block below condenses one stretch of a longer agent conversation, in \
order. Together they are too long: merge them into one summary of the whole span, in \
chronological order. Keep every request, decision, file path, identifier, number and unresolved \
error; drop repetition and whatever later stretches made obsolete. Output only the merged summary."""

HANDOFF_HEADER = (
    "[HANDOFF NOTE]\nAn earlier agent worked on this task and was stopped; its notes "
    "for you follow. The user's messages above are the original requests.\n\n"
)
COMPACT_SUMMARY_HEADER = "[COMPACT SUMMARY]\n"
SPLIT_ACKNOWLEDGEMENT = "Noted: I have the summary of the earlier work and will continue from it."
LAST_REQUEST_LEAD = "The user's latest request, quoted verbatim:"
CHUNK_HEADER = "[SUMMARY OF EARLIER MESSAGES {index}/{total}]\n"
PROGRESSIVE_HEADER = "[SUMMARY OF EARLIER WORK]\n"


def wrap(tag: str, text: str) -> str:
    return f"<{tag}>\n{text}\n</{tag}>"


def build_request(prompt: str, transcript: str, existing: str | None = None) -> list[dict[str, Any]]:
    """The OpenAI-dict messages for one summarizer call (see the module docstring for the shape)."""
    existing_block = wrap(EXISTING_TAG, existing if existing else NO_EXISTING_SUMMARY)
    transcript_block = wrap(TRANSCRIPT_TAG, transcript)
    if TRANSCRIPT_PLACEHOLDER in prompt or EXISTING_PLACEHOLDER in prompt:
        text = prompt.replace(EXISTING_PLACEHOLDER, existing_block)
        if TRANSCRIPT_PLACEHOLDER in text:
            text = text.replace(TRANSCRIPT_PLACEHOLDER, transcript_block)
        else:
            text = f"{text}\n\n{transcript_block}"
        return [{"role": "user", "content": text}]
    material = f"{existing_block}\n\n{transcript_block}" if existing is not None else transcript_block
    return [{"role": "system", "content": prompt}, {"role": "user", "content": material}]


def build_merge_request(summaries: list[str]) -> list[dict[str, Any]]:
    """The request merging consecutive chunk summaries again: each one in its own existing-summary block."""
    material = "\n\n".join(wrap(EXISTING_TAG, text) for text in summaries)
    return [{"role": "system", "content": MERGE_PROMPT}, {"role": "user", "content": material}]


def quote(text: str) -> str:
    """`text` as a quoted block (every line prefixed with '> ')."""
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines() or [""])


__all__ = [
    "CHUNK_PROMPT",
    "COMPACT_SUMMARY_HEADER",
    "HANDOFF_PROMPT",
    "MERGE_PROMPT",
    "PROGRESSIVE_PROMPT",
    "SPLIT_PROMPT",
    "STRUCTURED_PROMPT",
    "build_merge_request",
    "build_request",
    "quote",
    "wrap",
]
