#!/usr/bin/env bash
# The documentation site: set up .venv with the `docs` extra (mkdocs-material, mkdocstrings; the `test`
# extras include it), then build the site from docs/ and the package's docstrings into site/ with
# `mkdocs build --strict`, so any warning (a broken cross-reference, a docstring griffe cannot parse) fails
# the build. The test suite runs the same build. Extra arguments go to `mkdocs build` (e.g. `--site-dir
# DIR`); `--serve` serves the site on http://127.0.0.1:8000 instead, rebuilt on every change (extra
# arguments then go to `mkdocs serve`, e.g. `--dev-addr 127.0.0.1:8001`). Nothing is fetched while it
# builds or while a reader browses it: no web fonts, no analytics, no external scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh docs
export NO_MKDOCS_2_WARNING=1 # mkdocs-material's banner about MkDocs 2.0: nothing to act on here
if [ "${1:-}" = --serve ]; then
  shift
  exec .venv/bin/python -m mkdocs serve --strict "$@"
fi
exec .venv/bin/python -m mkdocs build --strict "$@"
