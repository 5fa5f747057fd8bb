"""``embedded_model_ready()``: what a notebook cell that needs the embedded model asks first.

Each case runs in a new interpreter, as a kernel would: the answer is kept for the process's life.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.notebook_runner import ROOT, python_path, without_llama

SKIPPED = "skipped: needs the embedded model (install rxagent[local]) — "
ASK_TWICE = "from rxagent.notebook import embedded_model_ready as ready\nprint(ready())\nprint(ready())\n"


def kernel(code: str, *first: Path, **env: str) -> str:
    """What ``code`` prints in a new interpreter with ``first`` ahead on its path and ``env`` set."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": python_path(*first, ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_without_llama_cpp_every_asking_cell_says_why_and_llama_cpp_is_tried_once(tmp_path: Path) -> None:
    # a llama_cpp whose library fails to load, as on a machine where llama.cpp cannot run; it notes each
    # attempt to import it
    attempts = tmp_path / "attempts"
    (tmp_path / "llama_cpp").mkdir()
    (tmp_path / "llama_cpp" / "__init__.py").write_text(
        f"open({str(attempts)!r}, 'a').write('import\\n')\n"
        "raise RuntimeError(\"Failed to load shared library 'libllama.so': illegal instruction\")\n"
    )
    said = kernel(ASK_TWICE, tmp_path)

    reason = "RuntimeError: Failed to load shared library 'libllama.so': illegal instruction"
    assert said.splitlines() == [SKIPPED + reason, "False", SKIPPED + reason, "False"]
    assert attempts.read_text().splitlines() == ["import"]  # the answer was kept


def test_the_stand_in_of_the_notebook_tests_makes_the_model_unavailable(tmp_path: Path) -> None:
    said = kernel(ASK_TWICE, without_llama(tmp_path))
    assert said.splitlines()[1::2] == ["False", "False"]
    assert said.splitlines()[0].startswith(SKIPPED + "RuntimeError: llama.cpp's library does not load here")


def test_a_gguf_path_that_names_nothing_is_the_reason_shown(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.gguf"
    said = kernel(ASK_TWICE, RXAGENT_GGUF=str(missing))
    line = SKIPPED + f"MissingModelError: model file not found: {missing}"
    assert said.splitlines() == [line, "False", line, "False"]


@pytest.mark.llm
def test_a_file_that_is_no_model_is_the_reason_shown(tmp_path: Path) -> None:
    garbage = tmp_path / "not-a-model.gguf"
    garbage.write_bytes(b"this is not a GGUF file\n" * 10)
    said = kernel(ASK_TWICE, RXAGENT_GGUF=str(garbage)).splitlines()
    assert said[1::2] == ["False", "False"]
    assert said[0] == said[2]
    assert said[0].startswith(SKIPPED + "ValueError: ")
    assert str(garbage) in said[0]


@pytest.mark.llm
def test_where_the_model_loads_the_cell_runs_and_prints_nothing() -> None:
    said = kernel(
        "from rxagent.notebook import embedded_model_ready as ready\n"
        "from rxagent import LlamaCppModel\n"
        "print(ready(), ready())\n"
        "print(LlamaCppModel(max_tokens=8).count_text('Hello there'))\n"
    )
    first, count = said.splitlines()
    assert first == "True True"
    assert int(count) > 0
