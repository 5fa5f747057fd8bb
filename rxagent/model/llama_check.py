"""The set-up's check that the installed llama.cpp runs on this CPU: ``python -m rxagent.model.llama_check``.

``scripts/_venv.sh`` runs it in a child process right after installing llama-cpp-python, and once on a
set-up that finds it installed but not yet checked. The embedded model, loaded as
:class:`~rxagent.model.llama_cpp.LlamaCppModel` loads it for ``rxagent run``, generates one token (the
model loads in about 0.2 s). A llama.cpp compiled for another CPU dies right there, by a signal: SIGILL
for an instruction this CPU lacks, or SIGSEGV as on an AMX Xeon (ggml-org/llama.cpp#20824). The set-up
then rebuilds it with portable flags, rather than leaving the user a bare "Segmentation fault".

The check also reads what llama.cpp was compiled with: ``llama_print_system_info()`` lists the instruction
sets compiled in (not those the CPU has). AVX-512, AVX-VNNI or AMX there mean a build for one CPU (the
``-march=native`` of an older set-up on such a machine): it runs here, but pip's cache hands that wheel to
every later install by version, on whatever CPU that runs. The set-up rebuilds such a wheel once.

The exit status is what the set-up acts on (see :class:`Verdict`); stdout gets one line saying what was
found, stderr the details (and, on a crash, Python's traceback from :mod:`faulthandler`).
"""

from __future__ import annotations

import asyncio
import faulthandler
import re
import sys
import time
from enum import IntEnum

from rxagent.messages import Msg
from rxagent.model.errors import ModelError
from rxagent.model.gguf import MissingModelError, default_gguf_path
from rxagent.model.llama_runtime import extra_bufts_wanted, import_llama
from rxagent.model.types import ChatRequest

__all__ = ["CPU_SPECIFIC_FEATURES", "Verdict", "compiled_features", "main"]

CPU_SPECIFIC_FEATURES = frozenset(
    {"AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI", "AMX_INT8"}
)
"""Instruction sets beyond the x86-64 baseline the set-up compiles for (AVX2, FMA, F16C, BMI2): compiled
in, they make a build for the CPUs that have them only. The set-up's flags turn each of them off."""


class Verdict(IntEnum):
    """The check's exit status. A crash is no verdict: the process dies by a signal (shell status 128+n)."""

    RUNS = 0
    """One token was generated, and the build holds only portable instruction sets."""
    CANNOT_CHECK = 2
    """The check could not reach llama.cpp (no model file, a bad setting): rebuilding would not help."""
    LLAMA_FAILED = 3
    """llama.cpp failed: llama-cpp-python could not be imported, or loading or generating raised."""
    CPU_SPECIFIC = 4
    """One token was generated, but the build has instruction sets of :data:`CPU_SPECIFIC_FEATURES`."""


_FEATURE = re.compile(r"([A-Za-z0-9_]+) = ([^ |]+)")


def compiled_features(system_info: str) -> frozenset[str]:
    """The features a ``llama_print_system_info()`` text reports as compiled in (value other than ``0``).

    Example:
        >>> sorted(compiled_features("CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 0 | "))
        ['AVX2', 'SSE3']
    """
    return frozenset(name for name, value in _FEATURE.findall(system_info) if value != "0")


async def _one_token() -> float:
    # Imported here: a broken llama-cpp-python must surface in main's import_llama, as LLAMA_FAILED.
    from rxagent.model.llama_cpp import LlamaCppModel
    from rxagent.operators import to_list

    model = LlamaCppModel()
    started = time.perf_counter()
    chunks = await to_list(model.stream(ChatRequest(messages=(Msg.user("Say hi."),), max_tokens=1)))
    if not any(chunk.usage is not None for chunk in chunks):
        raise ModelError("the embedded model's stream ended without its usage chunk")
    return time.perf_counter() - started


def main() -> int:
    """Run the check; return its :class:`Verdict` (the process's exit status)."""
    faulthandler.enable()  # on a crash, stderr shows where (the signal still ends the process)
    try:  # what no build of llama.cpp can fix is said before the library is loaded
        default_gguf_path()
        extra_bufts_wanted(None)
    except (MissingModelError, ValueError) as error:
        print(f"the check cannot run: {error}")
        return Verdict.CANNOT_CHECK
    try:
        llama_cpp = import_llama()
    except Exception as error:  # not installed, or its shared library does not load here
        print(f"llama-cpp-python does not import: {error}", file=sys.stderr)
        print("llama.cpp failed: llama-cpp-python does not import")
        return Verdict.LLAMA_FAILED
    try:
        seconds = asyncio.run(_one_token())
    except (MissingModelError, ValueError) as error:
        print(f"the check cannot run: {error}")
        return Verdict.CANNOT_CHECK
    except ModelError as error:
        print(f"llama.cpp failed: {error}")
        return Verdict.LLAMA_FAILED
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    print(info.strip(), file=sys.stderr)
    specific = sorted(compiled_features(info) & CPU_SPECIFIC_FEATURES)
    if specific:
        print(
            f"llama.cpp runs here, but was compiled for one kind of CPU ({', '.join(specific)} compiled in)"
        )
        return Verdict.CPU_SPECIFIC
    print(f"llama.cpp runs on this CPU: the embedded model answered in {seconds:.1f} s")
    return Verdict.RUNS


if __name__ == "__main__":
    sys.exit(main())
