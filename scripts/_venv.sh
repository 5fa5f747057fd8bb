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
stamp=".venv/.rxagent-installed-$(sha256sum pyproject.toml | cut -c1-16)-${extras//,/-}"
if [ ! -f "$stamp" ]; then
  echo "installing rxagent[$extras] into .venv" >&2
  .venv/bin/python -m pip install -q -e ".[$extras]"
  touch "$stamp"
fi
