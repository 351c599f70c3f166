"""Make every library the workbench uses work without network access.

Imported first by `workbench/__init__.py`. It only sets environment defaults (a user's own
settings win) and never imports litellm or tiktoken itself, so start-up stays fast.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def litellm_tokenizer_dir() -> str | None:
    """The folder where litellm ships tiktoken's BPE files (cl100k, o200k, p50k), found without importing it."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "litellm_core_utils" / "tokenizers"
    return str(folder) if folder.is_dir() else None


def configure() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        folder = litellm_tokenizer_dir()
        if folder:
            os.environ["TIKTOKEN_CACHE_DIR"] = folder


configure()
