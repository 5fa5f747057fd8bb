#!/usr/bin/env bash
# Run the notebooks with the embedded model and write them back with their outputs, so that a reader on
# GitHub sees the transcripts and the pictures: set up .venv with the `test` extras (the environment the
# suite executes the notebooks in: nbclient, ipykernel and the embedded model), then run
# `python -m tests.notebook_runner`. Extra arguments name the notebooks to run (default: all) or
# `--into DIR` to write them elsewhere. A notebook is left as it was if a cell fails or the embedded model
# cannot run here.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh test
exec .venv/bin/python -m tests.notebook_runner "$@"
