"""Whether this kernel can run the embedded model, for the notebook cells that need it.

A notebook mixes cells that run anywhere (the scripted model, loopback servers) with cells that need the
embedded model (SmolLM2 run by llama.cpp, the ``local`` extra). The second kind starts with
``if embedded_model_ready():``: where the model cannot run, the cell prints why and does nothing else,
and the rest of the notebook still runs top to bottom. The answer comes from loading the model for real
(importing llama.cpp alone does not prove its library loads on this CPU), once per kernel.
"""

from __future__ import annotations

import functools

__all__ = ["SKIPPED", "embedded_model_ready"]

SKIPPED = "skipped: needs the embedded model (install rxagent[local])"
"""How a cell that needs the embedded model starts its output when the model cannot run here."""


@functools.cache
def _problem() -> str | None:
    """Why the embedded model cannot run in this process, or ``None`` when it loaded."""
    from rxagent.model.llama_cpp import LlamaCppModel

    try:
        # The default settings are those of a plain LlamaCppModel(...) in a cell, which then finds this
        # very model in the process's shared cache instead of loading a second copy.
        _ = LlamaCppModel().llama
    except Exception as exc:  # whatever stops the model loading is the reason to show: nothing to recover
        return f"{type(exc).__name__}: {exc}"
    return None


def embedded_model_ready() -> bool:
    """``True`` when the embedded model loads here; otherwise print why the cell is skipped, and ``False``
    (documented at :func:`rxagent.notebook.embedded_model_ready`)."""
    problem = _problem()
    if problem is not None:
        print(f"{SKIPPED} — {problem}")
    return problem is None
