"""`import workbench` leaves the process as it found it; offline defaults apply where they are needed.

Each check runs in a fresh interpreter (a snapshot before and after), since the test process
itself has long imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each check in a fresh interpreter (LiteLLM's import takes seconds)


REPO = Path(__file__).resolve().parents[1]
OFFLINE_VARIABLES = (
    "TIKTOKEN_CACHE_DIR",
    "DATA_GYM_CACHE_DIR",
    "LITELLM_LOCAL_MODEL_COST_MAP",
    "LITELLM_LOG",
    "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "CUSTOM_TIKTOKEN_CACHE_DIR",
)

SNAPSHOT = """
import json, logging, os, sys, warnings
def snapshot():
    return {"environ": dict(os.environ), "meta_path": [repr(f) for f in sys.meta_path],
            "path_hooks": [repr(h) for h in sys.path_hooks], "root_handlers": [repr(h) for h in logging.root.handlers],
            "root_level": logging.root.level, "warning_filters": len(warnings.filters),
            "litellm_imported": "litellm" in sys.modules}
"""


def run(script: str, **env: str) -> dict:
    """Run `script` (which prints one JSON line last) in a fresh interpreter without the offline variables."""
    environ = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARIABLES}
    environ.update(PYTHONPATH=str(REPO), **env)
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT + script], capture_output=True, text=True, env=environ, cwd=REPO, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_and_a_heuristic_replay_change_nothing():
    out = run("""
before = snapshot()
import workbench as wb
after_import = snapshot()
from workbench.session import Message
messages = [Message("system", "You code."), Message("user", "Fix src/app.py please. " * 40)]
for n in range(12):
    messages.append(Message("assistant", f"step {n}: looking at src/app.py " * 20))
    messages.append(Message("user", f"result {n} " * 60))
result = wb.replay(messages, {"trigger": {"kind": "utilization", "ratio": 0.5},
                              "strategy": {"kind": "sliding_window", "window": 4},
                              "tokenizer": "heuristic", "context_limit": 6000, "max_output": 500})
after_replay = snapshot()
print(json.dumps({"before": before, "after_import": after_import, "after_replay": after_replay,
                  "compactions": len(result.compactions)}))
""")
    assert out["compactions"] > 0  # the replay did compact
    assert out["after_import"] == out["before"]
    assert out["after_replay"] == out["before"]
    assert not out["after_replay"]["litellm_imported"]


def test_tiktoken_works_offline_without_touching_the_environment():
    out = run("""
before = snapshot()
import workbench as wb
counts = [wb.count_tokens("hello world, offline", name) for name in ("cl100k_base", "o200k_base", "p50k_base")]
print(json.dumps({"same": snapshot() == before, "counts": counts,
                  "tiktoken_dir": os.environ.get("TIKTOKEN_CACHE_DIR")}))
""")
    assert all(count > 0 for count in out["counts"])
    assert out["same"] and out["tiktoken_dir"] is None


def test_a_user_tiktoken_cache_dir_is_respected(tmp_path):
    """With the user's folder set, tiktoken's own loader (which registers the encoding) reads it;
    without, the encoding is built from LiteLLM's bundled file and tiktoken's registry is untouched."""
    from workbench.offline import litellm_tokenizer_dir

    for file in litellm_tokenizer_dir().iterdir():
        if file.is_file():
            (tmp_path / file.name).write_bytes(file.read_bytes())
    script = """
import tiktoken.registry
import workbench as wb
count = wb.count_tokens("hello world", "p50k_base")
print(json.dumps({"count": count, "via_tiktoken": "p50k_base" in tiktoken.registry.ENCODINGS,
                  "dir": os.environ.get("TIKTOKEN_CACHE_DIR")}))
"""
    users = run(script, TIKTOKEN_CACHE_DIR=str(tmp_path))
    ours = run(script)
    assert users == {"count": ours["count"], "via_tiktoken": True, "dir": str(tmp_path)}
    assert ours["via_tiktoken"] is False and ours["dir"] is None


def test_the_offline_provider_works_when_the_user_set_nothing():
    out = run("""
before = snapshot()
import workbench as wb
from workbench.llm import Gateway
request = [{"role": "user", "content": "Please rename parse_args in cli/main.py"}]
answer = Gateway().model("workbench/extractive").complete(request)
after = snapshot()
print(json.dumps({"text": answer.text, "cost_map": after["environ"].get("LITELLM_LOCAL_MODEL_COST_MAP"),
                  "litellm_loaded": "litellm" in sys.modules,
                  "finders_added": [f for f in after["meta_path"] if f not in before["meta_path"]],
                  "handlers_same": after["root_handlers"] == before["root_handlers"]}))
""")
    assert "cli/main.py" in out["text"], out
    # the offline model is answered in process: LiteLLM is not even imported, so nothing of it is set
    assert out["litellm_loaded"] is False and out["cost_map"] is None, out
    assert not any("workbench" in finder or "LiteLLM" in finder for finder in out["finders_added"])
    assert out["handlers_same"]


def test_a_user_cost_map_setting_is_respected():
    out = run(
        """
from workbench.llm import load_litellm
load_litellm()
print(json.dumps({"cost_map": os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP"), "log": os.environ.get("LITELLM_LOG")}))
""",
        LITELLM_LOCAL_MODEL_COST_MAP="true",
        LITELLM_LOG="WARNING",
    )
    assert out == {"cost_map": "true", "log": "WARNING"}


@pytest.mark.parametrize(
    "preset", [{}, {"HF_HUB_OFFLINE": "0", "TIKTOKEN_CACHE_DIR": "/somewhere/else"}], ids=["unset", "user-set"]
)
def test_entry_point_defaults_never_override_the_user(preset):
    from workbench.offline import PROCESS_DEFAULTS, apply_defaults

    environ = dict(preset)
    applied = apply_defaults(environ)
    assert all(environ[name] == value for name, value in preset.items())
    assert set(applied).isdisjoint(preset)
    assert all(environ[name] == value for name, value in PROCESS_DEFAULTS.items() if name not in preset)
    if not preset:
        assert environ["TIKTOKEN_CACHE_DIR"].endswith("tokenizers")


@pytest.mark.parametrize(
    ("preset", "sdk"), [({}, False), ({"EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER": "false"}, True)]
)
def test_openai_compatible_calls_use_litellms_transport_unless_the_user_chose_the_sdk(preset, sdk):
    out = run(
        """
from workbench.llm import Gateway
from workbench.testing import FakeOpenAI
with FakeOpenAI() as server, Gateway() as gateway:
    model = gateway.model("openai/gpt-4o-mini", {"api_base": server.api_base, "api_key": "sk-test"})
    answer = model.complete([{"role": "user", "content": "Summarize: edited src/app.py"}])
    headers = {k.lower() for k in server.headers[0]}
print(json.dumps({"sdk": "x-stainless-lang" in headers, "tokens": answer.input_tokens, "cost": answer.cost_usd}))
""",
        **preset,
    )
    assert out["sdk"] is sdk  # the OpenAI SDK stamps its x-stainless-* headers on every request
    assert out["tokens"] > 0 and out["cost"] > 0  # usage and price read alike on both paths


def test_dir_offers_the_lazy_names_without_loading_them():
    """Notebook completion reads `dir(wb)`: the experiment functions are there before their first use."""
    found = run("""
import sys, workbench
names = dir(workbench)
print(json.dumps({"names": [n for n in ("run_experiment", "results", "compare", "replay") if n in names],
                  "loaded": "workbench.experiments" in sys.modules}))
""")
    assert found == {"names": ["run_experiment", "results", "compare", "replay"], "loaded": False}
