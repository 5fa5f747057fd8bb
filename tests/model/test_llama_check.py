"""``python -m rxagent.model.llama_check``, the set-up's check of llama.cpp, run as the set-up runs it: in a
child process of this checkout, its verdict in the exit status and one line on stdout."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rxagent.model.llama_check import CPU_SPECIFIC_FEATURES, Verdict, compiled_features

ROOT = Path(__file__).resolve().parent.parent.parent


def check(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rxagent.model.llama_check"],
        # prepended: the test run's own PYTHONPATH (the isolation's llama_cpp guard) stays in force
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.llm
def test_the_embedded_model_runs_a_token_on_the_portable_build() -> None:
    ran = check()

    assert ran.returncode == Verdict.RUNS, ran.stdout + ran.stderr
    assert re.fullmatch(
        r"llama\.cpp runs on this CPU: the embedded model answered in \d+\.\d s\n", ran.stdout
    )
    compiled = compiled_features(ran.stderr)  # the system information goes to stderr
    if platform.machine() in ("x86_64", "AMD64"):
        assert {"AVX2", "FMA", "F16C", "BMI2"} <= compiled  # the set-up's x86-64 baseline, no more
    assert compiled
    assert not compiled & CPU_SPECIFIC_FEATURES


def test_no_model_file_is_not_llama_cpps_fault() -> None:
    ran = check(RXAGENT_GGUF="/nowhere/model.gguf")

    assert ran.returncode == Verdict.CANNOT_CHECK
    assert ran.stdout == "the check cannot run: model file not found: /nowhere/model.gguf\n"


def test_a_bad_extra_bufts_setting_is_not_llama_cpps_fault() -> None:
    ran = check(RXAGENT_LLAMA_EXTRA_BUFTS="maybe")

    assert ran.returncode == Verdict.CANNOT_CHECK
    assert "RXAGENT_LLAMA_EXTRA_BUFTS must be 1 or 0" in ran.stdout


def test_compiled_features_are_those_reported_as_compiled_in() -> None:
    info = (
        "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | AVX_VNNI = 0 | REPACK = 1 | "
        "CUDA : ARCHS = 890 | "
    )
    assert compiled_features(info) == {"SSE3", "AVX2", "AVX512", "AMX_INT8", "REPACK", "ARCHS"}
    assert sorted(compiled_features(info) & CPU_SPECIFIC_FEATURES) == ["AMX_INT8", "AVX512"]
    assert compiled_features("") == frozenset()
