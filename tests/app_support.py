"""Shared set-up of the app tests: a temporary database of generated sessions, and page runners."""

from __future__ import annotations

from pathlib import Path

from builders import assistant, conversation, system, tool, user

from workbench.session import Session

APP = str(Path(__file__).resolve().parents[1] / "app.py")
HOSTILE = "<script>alert('x')</script><b>bold</b> <img src=x onerror=alert(1)>"


def planted_session() -> Session:
    """A session whose text holds HTML and a script, with two recorded compactions."""
    messages = [
        system(),
        user(f"Please look at this: {HOSTILE}"),
        assistant("reading", calls=(("p1", "read_file"),)),
        tool("p1", f"file content {HOSTILE}\n" * 3),
        assistant(f"I saw {HOSTILE}"),
        *conversation(6)[1:],
    ]
    recorded = [
        {
            "call_index": 2,
            "message_index": 5,
            "trigger": "auto",
            "tokens_before": 1234,
            "summary": f"summary with {HOSTILE}",
        },
        {"call_index": 4, "message_index": 9, "trigger": "manual", "tokens_before": None, "summary": ""},
    ]
    return Session.from_messages(
        messages, id="planted-html", dataset="planted", metadata={"recorded_compactions": recorded}
    )


def build_database(path: str) -> str:
    """The bundled samples plus the planted session and a generated one."""
    from workbench.cli import init_database
    from workbench.store import Store

    init_database(path)
    generated = Session.from_messages(conversation(12, result_chars=400), id="generated-12", dataset="generated")
    with Store(path) as store:
        store.import_sessions([planted_session(), generated])
    return path


def page_script(module: str) -> str:
    """An AppTest script running one page function of `workbench.ui.<module>` on its own."""
    return (
        f"from workbench.offline import apply_defaults\napply_defaults()\n"
        f"from workbench.ui.{module} import page\npage()\n"
    )
