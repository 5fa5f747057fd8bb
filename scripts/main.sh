#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv, then stream a completion.
# Until the embedded llama.cpp model lands, this streams from the scripted test model (no agent, no
# network); pass `--base-url URL --model NAME` to stream from any OpenAI-compatible server instead.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh test
exec .venv/bin/python -m rxagent stream "${@:-What can rxagent do?}"
