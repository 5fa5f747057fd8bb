#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv (the first time this compiles llama.cpp: about 8 minutes
# on 2 cores, and says so), then run an agent on the embedded model (SmolLM2-135M via llama.cpp, no
# network, no API key) with the demo tools, on a question that needs the calculator. Extra arguments go to
# `rxagent run`. The first step always calls a tool (a model this small would rather invent an answer);
# `--no-require-tool` lets the model choose.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh local
if [ "$#" -eq 0 ]; then
  set -- "What is 17 * 23? Use the calculator." --tools calculator,clock
fi
exec .venv/bin/rxagent run --require-tool "$@"
