#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up .venv, then lint, type-check and run every test.
# Extra arguments go to pytest (for example `bash scripts/test.sh -k fold`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh test
echo "== ruff" && .venv/bin/ruff check rxagent tests bench docs/_ext && .venv/bin/ruff format --check -q rxagent tests bench docs/_ext
echo "== basedpyright (strict, rxagent/)" && .venv/bin/basedpyright
echo "== pytest" && .venv/bin/pytest "$@"
