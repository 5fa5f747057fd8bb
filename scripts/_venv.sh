# Sourced by the set-up scripts: create .venv and install rxagent with the given extras, once per
# change of pyproject.toml (a stamp file remembers what was installed).
set -euo pipefail
extras="${1:-test}"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($python --version)" >&2
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# llama-cpp-python has no wheel on the registry and compiles llama.cpp; skipping its examples, tests,
# tools and server halves the build (about 8 minutes on 2 cores; pip caches the wheel afterwards).
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF}"
stamp=".venv/.rxagent-installed-$(sha256sum pyproject.toml | cut -c1-16)-${extras//,/-}"
if [ ! -f "$stamp" ]; then
  echo "installing rxagent[$extras] into .venv" >&2
  .venv/bin/python -m pip install -q -e ".[$extras]"
  touch "$stamp"
fi
