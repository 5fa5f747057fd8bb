# Sourced by the set-up scripts: create .venv and install rxagent with the given extras, once per
# change of pyproject.toml (a stamp file remembers what was installed; the `test` extras include `local`).
#
# The first install compiles llama.cpp (llama-cpp-python has no wheel on the registry): about 8 minutes on
# 2 cores. Then this says so before it starts, prints the elapsed time (and the build step reached) every
# $RXAGENT_PROGRESS_EVERY seconds (default 30), and keeps pip's whole output in .venv/pip-install.log.
# Later installs find the wheel in pip's cache and stay quiet.
set -euo pipefail
extras="${1:-test}"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($python --version)" >&2
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# Skipping llama.cpp's examples, tests, tools and server halves the build.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF}"
stamp_prefix=".venv/.rxagent-installed-$(sha256sum pyproject.toml | cut -c1-16)"
stamp="$stamp_prefix-${extras//,/-}"
if [ "$extras" = local ] && [ -f "$stamp_prefix-test" ]; then
  stamp="$stamp_prefix-test"
fi

_rxagent_compiles_llama() {
  # True when this install will build llama.cpp: the extras need it, it is not installed, and pip's cache
  # holds no wheel built earlier.
  case ",$extras," in *,local,* | *,test,*) ;; *) return 1 ;; esac
  if .venv/bin/python -c "import llama_cpp" >/dev/null 2>&1; then return 1; fi
  [ -z "$(.venv/bin/python -m pip cache list 'llama_cpp_python*' --format=abspath 2>/dev/null)" ]
}

_rxagent_install_with_progress() {
  local log=.venv/pip-install.log every="${RXAGENT_PROGRESS_EVERY:-30}" started status=0 pip ticker
  started=$(date +%s)
  echo "installing rxagent[$extras] into .venv: this compiles llama.cpp from source for llama-cpp-python" \
    "(no wheel on the package registry), about 8 minutes on 2 cores; only the first time, pip keeps the" \
    "wheel. pip's output goes to $log" >&2
  .venv/bin/python -m pip install -v -e ".[$extras]" >"$log" 2>&1 &
  pip=$!
  (
    # `wait` on the sleep lets the TERM below end the ticker at once, and its sleep with it.
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
      sleep "$every" &
      nap=$!
      wait "$nap"
      elapsed=$(($(date +%s) - started))
      step=$(grep -aoE '\[[0-9]+/[0-9]+\]' "$log" 2>/dev/null | tail -n 1 || true)
      echo "  still installing: $((elapsed / 60)) min $((elapsed % 60)) s${step:+, build step $step}" >&2
    done
  ) &
  ticker=$!
  wait "$pip" || status=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
    echo "the install failed (pip exited with $status); pip's whole output is in $log" >&2
    return "$status"
  fi
  echo "installed in $((($(date +%s) - started) / 60)) min $((($(date +%s) - started) % 60)) s" >&2
}

if [ ! -f "$stamp" ]; then
  if _rxagent_compiles_llama; then
    _rxagent_install_with_progress
  else
    echo "installing rxagent[$extras] into .venv" >&2
    .venv/bin/python -m pip install -q -e ".[$extras]"
  fi
  touch "$stamp"
fi

_rxagent_install_chromium() {
  # The dashboard's browser tests drive Debian's Chromium with Playwright (the `test` extra); Playwright's
  # own browser download (`playwright install`) is not used. Installed once, when missing; a failure is
  # reported here and the browser tests then say why they cannot run (CI fails them; never a silent skip).
  local chromium="${RXAGENT_CHROMIUM:-/usr/bin/chromium}" sudo="" started
  [ -x "$chromium" ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      echo "the browser tests need Chromium at $chromium: install it as root (apt-get install chromium)" >&2
      return 0
    fi
  fi
  started=$(date +%s)
  echo "installing chromium (apt) for the dashboard's browser tests" >&2
  if $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
      >.venv/chromium-install.log 2>&1; then
    echo "chromium installed in $(($(date +%s) - started)) s" >&2
  else
    tail -n 20 .venv/chromium-install.log >&2 2>/dev/null || true
    echo "could not install chromium (see .venv/chromium-install.log): the browser tests cannot run" >&2
  fi
}

case ",$extras," in *,test,*) _rxagent_install_chromium ;; esac
