"""The compaction view, shared by Compare and the Experiments drill-down: what one compaction wrote
beside what it replaced (long texts folded), a diff when the strategy edited rather than summarized,
its quality as a table read in each metric's direction, and each lost fact with the message it came
from. The data is `workbench.access.CompactionView`; this module only draws it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from workbench.access import CompactionView, ContextMessage, folded

#: Diff lines shown at most (a clearing of a long session rewrites hundreds of messages).
MAX_DIFF_LINES = 400


def counted(count: int) -> str:
    return f"{count:,} message{'s' * (count != 1)}"


def show_folded(text: str, empty: str = "(no text)") -> None:
    """The text's first lines, the rest behind an expander saying how much is folded."""
    head, rest = folded(text)
    if head or empty:
        st.text(head or empty)
    if rest:
        lines = rest.count("\n") + 1
        with st.expander(f"… the rest ({len(rest):,} characters, {lines:,} line{'s' * (lines != 1)})"):
            st.text(rest)


def show_messages(messages: tuple[ContextMessage, ...], none: str) -> None:
    if not messages:
        st.caption(none)
    for message in messages:
        st.caption(message.heading)
        show_folded(message.text, empty="(no text)" if not message.calls else "")
        for call in message.calls:
            st.caption(f"→ tool call {call}")


def quality_frame(view: CompactionView) -> Any:
    """The quality rows as a table: `metric`, `value` in the metric's unit (`charts.format_metric`), `better`."""
    import pandas as pd

    from workbench.experiments.charts import format_metric

    return pd.DataFrame(
        [
            {"metric": row.metric, "value": format_metric(row.metric, row.value), "better": row.better}
            for row in view.quality
        ],
        columns=["metric", "value", "better"],
    )


def lost_facts_frame(view: CompactionView) -> Any:
    """One row per lost fact: the fact, the replaced message it came from (`#3 tool · read_file`), an excerpt."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "fact": fact.fact,
                "from message": fact.source.heading if fact.source else "(not verbatim in a replaced message)",
                "excerpt": fact.excerpt,
                "used again later": fact.needed,
            }
            for fact in view.lost_facts
        ],
        columns=["fact", "from message", "excerpt", "used again later"],
    )


def show_compaction(view: CompactionView, key: str) -> None:
    """Draw one compaction; `key` makes its tables' keys unique on the page."""
    st.caption(
        f"Compaction #{view.event_index} before call {view.call_index}: {view.tokens_before:,} → "
        f"{view.tokens_after:,} tokens, {view.messages_before} messages in → {view.messages_after} out"
    )
    if view.error:
        st.error(f"failed: {view.error}" + (" (fell back)" if view.fell_back else ""))
    written, replaced = st.columns(2)
    with written:
        if view.summary:
            st.markdown("**Summary**")
            show_folded(view.summary)
        else:
            st.markdown(f"**Written in their place ({counted(len(view.written))})**")
            show_messages(view.written, "Nothing: the replaced messages were dropped.")
    with replaced:
        st.markdown(f"**What it replaced ({counted(len(view.replaced))})**")
        show_messages(view.replaced, "Nothing was replaced.")
    if view.edits and (view.replaced or view.written):
        lines = view.diff()
        st.markdown("**Diff** (no summary: the strategy edited or dropped messages)")
        st.code("\n".join(lines[:MAX_DIFF_LINES]) or "(no difference)", language="diff")
        if len(lines) > MAX_DIFF_LINES:
            st.caption(f"First {MAX_DIFF_LINES:,} of {len(lines):,} diff lines shown.")
    if view.quality:
        st.markdown("**Quality of this compaction**")
        st.dataframe(quality_frame(view), hide_index=True, width="stretch", key=f"{key}:quality")
    if view.lost_facts:
        st.markdown(f"**Lost facts ({len(view.lost_facts)})**: each with the replaced message it came from")
        st.dataframe(lost_facts_frame(view), hide_index=True, width="stretch", key=f"{key}:lost")
