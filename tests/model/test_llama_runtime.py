"""llama.cpp's extra buffer types: off for every embedded model unless the option or
``RXAGENT_LLAMA_EXTRA_BUFTS`` turns them on; read back from the loaded model's parameters, and from what
llama.cpp itself logs while it loads."""

from __future__ import annotations

import contextlib
import io

import pytest

from rxagent.model import embedders
from rxagent.model.embedders import LlamaCppEmbedder
from rxagent.model.gguf import default_gguf_path
from rxagent.model.llama_cpp import LlamaCppModel
from rxagent.model.llama_runtime import EXTRA_BUFTS_ENV, extra_bufts_wanted, load_llama

EXTRA_BUFFER_TYPES = ("CPU_REPACK", "AMX", "KLEIDIAI")
"""Names of llama.cpp's CPU extra buffer types, as its load log writes them."""


@pytest.mark.llm
def test_the_embedded_model_loads_without_extra_buffer_types_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(EXTRA_BUFTS_ENV, raising=False)
    assert LlamaCppModel(n_ctx=512).llama.model_params.use_extra_bufts is False


@pytest.mark.llm
@pytest.mark.parametrize(
    ("option", "env", "loaded_with"),
    [
        (True, None, True),
        (None, "1", True),
        (None, " On ", True),
        (None, "0", False),
        (None, "", False),
        (False, "1", False),  # the option wins over the environment
        (True, "0", True),
    ],
)
def test_the_option_or_the_environment_turns_them_on(
    monkeypatch: pytest.MonkeyPatch, option: bool | None, env: str | None, loaded_with: bool
) -> None:
    if env is None:
        monkeypatch.delenv(EXTRA_BUFTS_ENV, raising=False)
    else:
        monkeypatch.setenv(EXTRA_BUFTS_ENV, env)
    model = LlamaCppModel(n_ctx=512, use_extra_bufts=option)
    assert model.llama.model_params.use_extra_bufts is loaded_with


@pytest.mark.llm
@pytest.mark.parametrize("on", [False, True])
def test_llama_cpp_itself_loads_with_the_setting(on: bool) -> None:
    log = io.StringIO()
    with contextlib.redirect_stderr(log):  # llama-cpp-python hands llama.cpp's log to Python's stderr
        llama = load_llama(str(default_gguf_path()), use_extra_bufts=on, n_ctx=256, verbose=True)
    llama.close()
    # The system-information line lists what was compiled in ("REPACK = 1"), loaded or not.
    loading = [line for line in log.getvalue().splitlines() if " = 1 |" not in line]
    assert any(name in line for line in loading for name in EXTRA_BUFFER_TYPES) is on


@pytest.mark.llm
async def test_the_embedder_loads_without_them_by_default_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EXTRA_BUFTS_ENV, raising=False)
    for option, loaded_with in ((None, False), (True, True)):
        embedder = LlamaCppEmbedder(n_ctx=64, use_extra_bufts=option)
        assert len(await embedder.embed(["portable"])) == 1
        model, _ = embedders._LLAMAS[(str(embedder.path), 64, loaded_with)]  # pyright: ignore[reportPrivateUsage]
        assert model.model_params.use_extra_bufts is loaded_with


@pytest.mark.parametrize("raw", ["maybe", "2", "enabled"])
def test_a_value_that_is_neither_on_nor_off_is_refused(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(EXTRA_BUFTS_ENV, raw)
    message = f"{EXTRA_BUFTS_ENV} must be 1 or 0 (or true/false, yes/no, on/off), not {raw!r}"
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LlamaCppModel()
    with pytest.raises(ValueError, match="must be 1 or 0"):
        LlamaCppEmbedder()
    assert extra_bufts_wanted(True) is True  # an explicit choice does not read the variable
