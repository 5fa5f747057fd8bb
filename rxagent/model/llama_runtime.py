"""llama-cpp-python as rxagent loads it: the import, and the one load setting every embedded model shares.

Both the embedded chat model (:class:`~rxagent.model.llama_cpp.LlamaCppModel`) and the embedder
(:class:`~rxagent.model.embedders.LlamaCppEmbedder`) load their weights through :func:`load_llama`.

**Extra buffer types are off unless asked for.** llama.cpp can move weights into "extra buffer types" at
load time (``llama_model_params.use_extra_bufts``): CPU-specific repacked layouts, such as the AMX tiles
of Intel Xeons. On a Xeon that advertises AMX, a llama.cpp compiled for that CPU faulted on the first AMX
instruction of that path (ggml-org/llama.cpp#20824): a bare segfault on the first token. Without them the
weights stay as the file has them, which every build runs. Turn them on with ``use_extra_bufts=True`` or
``RXAGENT_LLAMA_EXTRA_BUFTS=1``: some CPUs then compute faster.

``llama_cpp.Llama`` takes no ``use_extra_bufts`` argument (it fills ``llama_model_params`` from
llama.cpp's defaults and loads the model inside its constructor), so :func:`load_llama` uses a subclass
that sets the field as the constructor stores the parameters: no process-wide patching, and the loaded
model's ``model_params.use_extra_bufts`` says what it was loaded with.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from rxagent.model.errors import ModelError

if TYPE_CHECKING:
    from types import ModuleType

    from llama_cpp import Llama
    from llama_cpp.llama_cpp import llama_model_params

__all__ = ["EXTRA_BUFTS_ENV", "extra_bufts_wanted", "import_llama", "load_llama"]

EXTRA_BUFTS_ENV = "RXAGENT_LLAMA_EXTRA_BUFTS"
"""Environment variable: ``1`` loads embedded models with llama.cpp's extra buffer types (default off)."""

_YES = frozenset({"1", "true", "yes", "on"})
_NO = frozenset({"", "0", "false", "no", "off"})


def extra_bufts_wanted(choice: bool | None = None) -> bool:
    """Whether to load with llama.cpp's extra buffer types: ``choice``, else ``$RXAGENT_LLAMA_EXTRA_BUFTS``.

    The variable takes ``1``/``0``, ``true``/``false``, ``yes``/``no`` or ``on``/``off`` (any case);
    unset or empty means off.

    Raises:
        ValueError: the variable holds anything else (a typo must not silently choose for the user).
    """
    if choice is not None:
        return choice
    raw = os.environ.get(EXTRA_BUFTS_ENV, "")
    value = raw.strip().lower()
    if value in _YES:
        return True
    if value in _NO:
        return False
    raise ValueError(f"{EXTRA_BUFTS_ENV} must be 1 or 0 (or true/false, yes/no, on/off), not {raw!r}")


def import_llama() -> ModuleType:
    """The ``llama_cpp`` module.

    Raises:
        ModuleNotFoundError: llama-cpp-python is not installed (the message says which extra brings it).
    """
    try:
        import llama_cpp
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the embedded model needs llama-cpp-python: pip install 'rxagent[local]'"
        ) from None
    return llama_cpp


def load_llama(model_path: str, *, use_extra_bufts: bool, **params: Any) -> Llama:
    """``llama_cpp.Llama(model_path, **params)``, loaded with or without llama.cpp's extra buffer types.

    Raises:
        ModelError: ``use_extra_bufts`` is false and this llama-cpp-python is too old to turn them off
            (its ``llama_model_params`` has no such field); the message says what to do.
    """
    llama_class = _llama_with_extra_bufts_setting()
    if not use_extra_bufts and not _has_extra_bufts_field():
        raise ModelError(
            "this llama-cpp-python cannot load a model without llama.cpp's extra buffer types (its "
            "llama_model_params has no use_extra_bufts): upgrade it (pip install -U llama-cpp-python), "
            f"or set {EXTRA_BUFTS_ENV}=1 to load with them"
        )
    return llama_class(model_path=model_path, rxagent_use_extra_bufts=use_extra_bufts, **params)


def _has_extra_bufts_field() -> bool:
    from llama_cpp.llama_cpp import llama_model_params

    fields: list[tuple[str, Any]] = getattr(llama_model_params, "_fields_", [])
    return any(name == "use_extra_bufts" for name, *_ in fields)


@functools.cache
def _llama_with_extra_bufts_setting() -> type[Llama]:
    # Built on first use: llama-cpp-python is an optional dependency.
    llama_cpp = import_llama()
    base: type[Llama] = llama_cpp.Llama

    class _Llama(base):
        """``llama_cpp.Llama`` whose model parameters get ``use_extra_bufts`` before the model loads."""

        def __init__(self, *args: Any, rxagent_use_extra_bufts: bool = False, **kwargs: Any) -> None:
            # (A default, because Llama.__setstate__ calls __init__ with the base's arguments only.)
            # Set before the base constructor runs: it assigns model_params, then loads the model.
            self._rxagent_use_extra_bufts = rxagent_use_extra_bufts
            super().__init__(*args, **kwargs)  # pyright: ignore[reportUnknownMemberType] (its **kwargs)

        @property
        def model_params(self) -> llama_model_params:
            return self._rxagent_model_params

        @model_params.setter
        def model_params(self, params: llama_model_params) -> None:
            # (Without the field, in a llama-cpp-python too old to have it, this is a plain attribute that
            # says what llama.cpp then does: load_llama refuses "off" there, and "on" is all it knows.)
            params.use_extra_bufts = self._rxagent_use_extra_bufts
            self._rxagent_model_params = params

    return _Llama
