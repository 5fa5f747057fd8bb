"""Run the Example section of one documented object (a facade entry, say) as a doctest."""

from __future__ import annotations

import doctest
import inspect

__all__ = ["run_examples"]


def run_examples(documented: object) -> doctest.TestResults:
    """Run the examples in ``documented``'s docstring with its module's names in scope; failures print."""
    module = inspect.getmodule(documented)
    scope = dict(vars(module)) if module is not None else {}
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder(recurse=False).find(documented, globs=scope):
        runner.run(test)
    return runner.summarize(verbose=False)
