"""The notebooks run, top to bottom, on a real kernel: they are documentation that cannot rot."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def outputs_text(notebook: Any) -> str:
    parts: list[str] = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output["text"])
            for value in output.get("data", {}).values():
                parts.append(str(value))
    return "\n".join(parts)


@pytest.mark.llm
def test_quickstart_notebook_runs_with_the_scripted_and_the_embedded_model() -> None:
    path = NOTEBOOKS / "01_quickstart.ipynb"
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    text = outputs_text(notebook)
    assert "⚙ weather({'city': 'Oslo'})" in text
    assert "→ Oslo: 14 °C, light rain" in text
    assert "→ 17" in text
    assert "[MODEL_STOP] 2 step(s)" in text
    assert "assistant: It is 14 °C with light rain in Oslo" in text
    # The embedded model: its forced first step calls the tool (first_tool_choice="required"); what it does
    # next is its own choice (answer, call again, or say nothing), so any ending reason will do.
    local_part = text.split("⚙ add(", 1)[-1]
    assert "⚙ add(" in text
    assert re.search(r"\[(MODEL_STOP|MAX_ITERATIONS|NO_ANSWER)\] \d+ step\(s\)", local_part)
