"""Offline defaults, applied where they are needed and never on `import workbench`.

The workbench runs without network access: tiktoken's BPE files come from the copies LiteLLM
ships, LiteLLM reads its bundled price map, and Hugging Face lookups stay local. Importing the
package changes nothing; instead:

- `tiktoken_encoding(name)` (used by the project's tokenizers) builds an encoding from LiteLLM's
  bundled file without touching `os.environ`, unless the user chose a tiktoken cache folder
  (`TIKTOKEN_CACHE_DIR` / `DATA_GYM_CACHE_DIR`), which is then used as tiktoken always does;
- `import_litellm()` (used by the gateway and the `litellm:<model>` tokenizer) sets LiteLLM's
  offline variables, only those the user left unset, at the moment LiteLLM is first imported
  (LiteLLM reads them at import time); the tokenizer also keeps Hugging Face lookups local;
- `apply_defaults()` is for entry points (the CLI, the app): it sets every default, again only
  where the user set nothing, for the whole process they own.

Note that LiteLLM itself, when imported, points `TIKTOKEN_CACHE_DIR` at its bundled folder.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import os
import threading
import types
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

__all__ = [
    "HUB_DEFAULTS",
    "LITELLM_DEFAULTS",
    "PROCESS_DEFAULTS",
    "apply_defaults",
    "import_litellm",
    "litellm_tokenizer_dir",
    "tiktoken_encoding",
]

#: Read by LiteLLM: its bundled price map instead of a download, quiet logs, and its own HTTP
#: transport for OpenAI-compatible providers instead of the OpenAI SDK, whose request validation
#: (`openai._utils._transform`, a walk over every message against the SDK's TypedDicts) cost about
#: half the gateway's CPU per call in the experiments bench. Set the last to "false" for the SDK.
LITELLM_DEFAULTS: dict[str, str] = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER": "true",
}
#: Everything an entry point sets: LiteLLM's, and no Hugging Face hub lookups (tokenizers of
#: `litellm:<llama...>` models otherwise try the hub for ~20 s).
HUB_DEFAULTS: dict[str, str] = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
PROCESS_DEFAULTS: dict[str, str] = {**LITELLM_DEFAULTS, **HUB_DEFAULTS}
_USER_TIKTOKEN_CACHE = ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")

_litellm_lock = threading.Lock()


def litellm_tokenizer_dir() -> Path | None:
    """The folder where LiteLLM ships tiktoken's BPE files (cl100k, o200k, p50k), found without importing it."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def _set_unset(defaults: dict[str, str], environ: MutableMapping[str, str]) -> dict[str, str]:
    applied = {name: value for name, value in defaults.items() if name not in environ}
    environ.update(applied)
    return applied


def apply_defaults(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the offline defaults the user has not set (for CLI and app entry points); returns what was set.

    Also points `TIKTOKEN_CACHE_DIR` at LiteLLM's bundled BPE files when neither it nor
    `DATA_GYM_CACHE_DIR` is set, so tiktoken works offline for any library in the process.
    """
    environ = os.environ if environ is None else environ
    defaults = dict(PROCESS_DEFAULTS)
    folder = litellm_tokenizer_dir()
    if folder is not None and not any(name in environ for name in _USER_TIKTOKEN_CACHE):
        defaults["TIKTOKEN_CACHE_DIR"] = str(folder)
    return _set_unset(defaults, environ)


def import_litellm(*, hub_offline: bool = False) -> Any:
    """Import LiteLLM with its offline defaults (those the user left unset) in place.

    `hub_offline`: also keep Hugging Face lookups local (for LiteLLM's tokenizers of open models).
    """
    import sys

    if hub_offline:
        _set_unset(HUB_DEFAULTS, os.environ)
    module = sys.modules.get("litellm")
    if module is not None and hasattr(module, "completion"):
        return module
    with _litellm_lock:
        _set_unset(LITELLM_DEFAULTS, os.environ)
        import litellm

    return litellm


# -- tiktoken ------------------------------------------------------------------------------------


def _bundled_loader(folder: Path) -> Any:
    """A stand-in for `tiktoken.load.load_tiktoken_bpe` that reads LiteLLM's copy of a BPE file.

    tiktoken names a cached file by the sha1 of its URL, and LiteLLM ships its files under those
    names; the expected sha256 is still checked. Nothing is written anywhere.
    """
    from tiktoken.load import check_hash

    def load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        path = folder / hashlib.sha1(url.encode()).hexdigest()
        if not path.is_file():
            raise FileNotFoundError(f"{url} is not among LiteLLM's bundled BPE files in {folder}")
        data = path.read_bytes()
        if expected_hash and not check_hash(data, expected_hash):
            raise ValueError(f"{path}: the bundled copy of {url} does not match its expected hash")
        ranks: dict[bytes, int] = {}
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return ranks

    return load


@functools.cache  # an encoding takes about a second to build; tiktoken's own registry caches likewise
def _from_bundled_file(name: str, folder: Path) -> Any:
    import tiktoken
    from tiktoken_ext import openai_public  # type: ignore[import-untyped]  # tiktoken ships no stubs for it

    constructor = openai_public.ENCODING_CONSTRUCTORS.get(name)
    if constructor is None:
        raise ValueError(f"unknown tiktoken encoding {name!r}")
    # tiktoken's own constructor (pattern, special tokens), reading ranks from the local copy
    local = types.FunctionType(
        constructor.__code__,
        {**constructor.__globals__, "load_tiktoken_bpe": _bundled_loader(folder)},
        constructor.__name__,
        constructor.__defaults__,
        constructor.__closure__,
    )
    return tiktoken.Encoding(**local())


def tiktoken_encoding(name: str) -> Any:
    """The tiktoken encoding `name`, offline.

    When the user set `TIKTOKEN_CACHE_DIR` or `DATA_GYM_CACHE_DIR`, or LiteLLM ships no copy of
    the file, this is plain `tiktoken.get_encoding(name)`. Otherwise the encoding is built from
    LiteLLM's bundled BPE file, leaving `os.environ` and tiktoken's registry untouched.
    """
    import tiktoken

    folder = litellm_tokenizer_dir()
    if folder is None or any(variable in os.environ for variable in _USER_TIKTOKEN_CACHE):
        return tiktoken.get_encoding(name)
    try:
        return _from_bundled_file(name, folder)
    except (FileNotFoundError, ValueError, AttributeError, TypeError):
        return tiktoken.get_encoding(name)
