"""Run the notebooks on a real kernel, and write them back with their outputs.

The tests run them with :func:`execute`. ``python -m tests.notebook_runner [NAME ...]`` (what
``bash scripts/notebooks.sh`` calls once the environment is set up) runs them with the embedded model and
writes each back in place, so that a reader on GitHub sees the transcripts and the pictures. Before a
notebook is written, :func:`normalise` takes out what changes from run to run without telling the reader
anything (timings, the interpreter's version, random widget ids), so that regenerating leaves small
diffs. A notebook is not written if a cell failed, or if a cell skipped itself because the embedded model
could not run here: the committed notebooks carry the model's outputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat import NotebookNode

from rxagent.notebook._embedded import SKIPPED

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "python3"
CELL_TIMEOUT_S = 300

NO_LLAMA = (
    "raise RuntimeError(\"llama.cpp's library does not load here (a stand-in llama_cpp, as on a machine "
    'where llama.cpp cannot load)")\n'
)
"""The whole of the stand-in ``llama_cpp`` package that a run without the embedded model imports."""


def names(folder: Path = NOTEBOOKS) -> list[str]:
    """The notebooks in ``folder``, by file name, in reading order."""
    return sorted(path.name for path in folder.glob("*.ipynb"))


def without_llama(folder: Path) -> Path:
    """A folder in ``folder`` holding a stand-in ``llama_cpp`` that fails to import: first on a process's
    ``PYTHONPATH``, it makes the process a machine where llama.cpp cannot load."""
    stand_in = folder / "without-llama"
    (stand_in / "llama_cpp").mkdir(parents=True, exist_ok=True)
    (stand_in / "llama_cpp" / "__init__.py").write_text(NO_LLAMA, encoding="utf-8")
    return stand_in


def python_path(*first: Path) -> str:
    """A ``PYTHONPATH`` with ``first`` ahead of the inherited one."""
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([*map(str, first), *([inherited] if inherited else [])])


def check_kernel() -> None:
    """Fail, saying why, unless the ``python3`` kernel runs this interpreter (jupyter_client starts a spec
    whose command is a bare ``python`` with this process's interpreter; a spec installed with another
    interpreter's path would run the notebooks in another environment)."""
    command = KernelSpecManager().get_kernel_spec(KERNEL).argv[0]
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    # the same environment: the same bin folder (its pythons are links to one interpreter, so compare
    # the folders, not where the links lead)
    same = Path(command).parent.resolve() == Path(sys.executable).parent.resolve()
    if command not in bare and not same:
        raise RuntimeError(
            f"the {KERNEL!r} kernel runs {command}, not {sys.executable}: "
            f"run {sys.executable} -m ipykernel install --user --name {KERNEL}"
        )


def execute(name: str, scratch: Path, *, embedded: bool, folder: Path = NOTEBOOKS) -> NotebookNode:
    """Run ``folder/NAME`` top to bottom, in ``folder``, on a new kernel that imports this checkout's rxagent.

    Args:
        name: the notebook's file name in ``folder`` (default: ``notebooks/``).
        scratch: an existing folder the caller removes afterwards: the kernel's temporary directory
            (``TMPDIR``), so whatever a notebook leaves in temp lands there.
        embedded: ``False`` puts a stand-in ``llama_cpp`` that fails to import first on the kernel's path,
            as on a machine where llama.cpp cannot load: the cells that need the embedded model then
            print why they are skipped.

    Returns:
        The notebook with its outputs, as nbclient left it (see :func:`normalise`).

    Raises:
        CellExecutionError: a cell failed (the message holds its traceback).
    """
    check_kernel()
    notebook = nbformat.read(folder / name, as_version=4)
    first = [ROOT] if embedded else [without_llama(scratch), ROOT]
    env = {**os.environ, "PYTHONPATH": python_path(*first), "TMPDIR": str(scratch)}
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL,
        record_timing=False,  # the times each cell started and ended: new on every run
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute(env=env)
    return notebook


def skipped(cell: NotebookNode) -> str | None:
    """What a cell printed when it skipped itself for want of the embedded model, if it did."""
    for output in cell.get("outputs", []):
        text = str(output.get("text", "")) if output.get("output_type") == "stream" else ""
        if text.startswith(SKIPPED):
            return text.strip()
    return None


def normalise(notebook: NotebookNode) -> NotebookNode:
    """Take out of an executed notebook, in place, what changes from run to run and tells a reader nothing.

    - a cell's ``execution`` metadata (when it started and ended);
    - the interpreter's version in ``language_info``;
    - how the kernel happened to flush printed text: consecutive stream outputs of one stream become one,
      as a front end shows them;
    - widget ids, random on every run: numbered in the order the widgets were made, in the outputs and in
      the saved widget state alike.
    """
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = _joined_streams(cell.outputs)
    notebook.metadata.get("language_info", {}).pop("version", None)
    state = notebook.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    ids = {old: f"{n:032x}" for n, old in enumerate(state.get("state", {}), start=1)}
    if ids:
        parts = {"cells": notebook.cells, "widgets": notebook.metadata.widgets}
        renamed = nbformat.from_dict(_renamed(parts, ids))
        notebook.cells = renamed.cells
        notebook.metadata.widgets = renamed.widgets
    return notebook


def _joined_streams(outputs: list[NotebookNode]) -> list[NotebookNode]:
    joined: list[NotebookNode] = []
    for output in outputs:
        last = joined[-1] if joined else None
        if (
            last is not None
            and output.output_type == "stream"
            and last.output_type == "stream"
            and last.name == output.name
        ):
            last.text += output.text
        else:
            joined.append(output)
    return joined


def _renamed(value: Any, ids: dict[str, str]) -> Any:
    """``value`` with each widget id in ``ids`` replaced: as a key, a value or an ``IPY_MODEL_`` reference."""
    if isinstance(value, dict):
        return {ids.get(key, key): _renamed(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [_renamed(item, ids) for item in value]
    if isinstance(value, str):
        if value in ids:
            return ids[value]
        if value.startswith("IPY_MODEL_") and value.removeprefix("IPY_MODEL_") in ids:
            return "IPY_MODEL_" + ids[value.removeprefix("IPY_MODEL_")]
    return value


def dumps(notebook: NotebookNode) -> str:
    """The notebook's file text, as Jupyter writes it (and as the committed notebooks are)."""
    text = nbformat.writes(notebook)
    return text if text.endswith("\n") else text + "\n"


def main(argv: Sequence[str] | None = None, *, folder: Path = NOTEBOOKS) -> int:
    """Run the named notebooks of ``folder`` (default: all) with the embedded model, and write them back
    with their outputs (into ``folder`` unless ``--into`` says otherwise). Returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="bash scripts/notebooks.sh",
        description="Run the notebooks with the embedded model and write them back with their outputs.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="a notebook in notebooks/ (default: all)")
    parser.add_argument(
        "--into", type=Path, default=folder, help="write the notebooks here instead (default: notebooks/)"
    )
    args = parser.parse_args(argv)
    chosen: list[str] = args.names or names(folder)
    unknown = [name for name in chosen if name not in names(folder)]
    if unknown:
        parser.error(f"no such notebook: {', '.join(unknown)} (there are: {', '.join(names(folder))})")
    into: Path = args.into
    if not into.is_dir():
        parser.error(f"--into {into}: not a folder")
    failed = 0
    for name in chosen:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="rxagent-notebook-") as scratch:
            try:
                notebook = execute(name, Path(scratch), embedded=True, folder=folder)
            except CellExecutionError as error:
                print(f"{name}: a cell failed, the notebook was not written:\n{error}", file=sys.stderr)
                failed += 1
                continue
        reasons = [reason for cell in notebook.cells if (reason := skipped(cell))]
        if reasons:
            print(
                f"{name}: the embedded model cannot run here, so the notebook was not written "
                f"(the committed notebooks carry its outputs): {reasons[0]}",
                file=sys.stderr,
            )
            failed += 1
            continue
        (into / name).write_text(dumps(normalise(notebook)), encoding="utf-8")
        print(f"wrote {into / name} in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
