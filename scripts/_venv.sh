# Sourced by the set-up scripts: create .venv and install rxagent with the given extras, once per
# change of pyproject.toml (a stamp file remembers what was installed; the `test` extras include `local`
# and `docs`).
#
# The first install compiles llama.cpp (llama-cpp-python has no wheel on the registry): about 8 minutes on
# 2 cores. Then this says so before it starts, prints the elapsed time (and the build step reached) every
# $RXAGENT_PROGRESS_EVERY seconds (default 30), and keeps pip's whole output in .venv/pip-install.log.
# Later installs find the wheel in pip's cache and stay quiet.
#
# Once installed, llama.cpp is checked once (a stamp file remembers it): the embedded model generates one
# token in a child process. A wheel that crashes there, or was compiled for one kind of CPU, is removed
# from pip's cache and compiled again with the portable flags below (see _rxagent_check_llama).
set -euo pipefail
extras="${1:-test}"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($python --version)" >&2
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# How llama.cpp is compiled. Its default (GGML_NATIVE) is `-march=native`: every instruction set of the
# build machine's CPU. Such a wheel crashed elsewhere: on an AMX Xeon its AMX weight-repacking path faulted
# (ggml-org/llama.cpp#20824), and a build on an AVX-512 machine dies with SIGILL on an AVX2-only one. pip's
# cache then hands the wheel it built to every later install of that version, whatever the flags or CPU.
# So the build does not depend on this CPU: on x86-64 a stated baseline, x86-64-v3 (AVX2, FMA, F16C, BMI2:
# Intel since 2013, AMD since 2015), with AVX-512, AVX-VNNI and AMX off; elsewhere (aarch64) only
# GGML_NATIVE=OFF, the compiler's baseline for the architecture (the x86 options mean nothing there).
# Skipping llama.cpp's examples, tests, tools and server halves the build.
# Your own CMAKE_ARGS are added after these, and cmake keeps the last value of an option, so yours win
# (e.g. CMAKE_ARGS=-DGGML_NATIVE=ON for a build tuned to this machine, which the check then accepts). They
# take effect only when llama.cpp is compiled: run `.venv/bin/python -m pip cache remove llama_cpp_python`
# and `.venv/bin/python -m pip uninstall -y llama-cpp-python` first, or pip reinstalls the cached wheel.
_rxagent_llama_cmake_args="-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF"
_rxagent_llama_cmake_args+=" -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=OFF"
case "$(uname -m)" in
  x86_64 | amd64)
    _rxagent_llama_cmake_args+=" -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    _rxagent_llama_cmake_args+=" -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF"
    _rxagent_llama_cmake_args+=" -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    ;;
esac
_rxagent_user_cmake_args="${CMAKE_ARGS:-}"
export CMAKE_ARGS="$_rxagent_llama_cmake_args${_rxagent_user_cmake_args:+ $_rxagent_user_cmake_args}"
stamp_prefix=".venv/.rxagent-installed-$(sha256sum pyproject.toml | cut -c1-16)"
stamp="$stamp_prefix-${extras//,/-}"
if { [ "$extras" = local ] || [ "$extras" = docs ]; } && [ -f "$stamp_prefix-test" ]; then
  stamp="$stamp_prefix-test"
fi
# Written once the installed llama.cpp has run the embedded model on this CPU (see _rxagent_check_llama).
checked="$stamp_prefix-llama-checked"

_rxagent_wants_llama() {
  case ",$extras," in *,local,* | *,test,*) return 0 ;; *) return 1 ;; esac
}

_rxagent_compiles_llama() {
  # True when this install will build llama.cpp: the extras need it, it is not installed, and pip's cache
  # holds no wheel built earlier.
  _rxagent_wants_llama || return 1
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

_rxagent_judge_llama() {
  # Runs the check (one token on the embedded model) in a child process, so that a crash cannot take the
  # set-up with it; the command substitution also keeps bash from printing its own "Segmentation fault".
  # Sets llama_verdict (runs | rebuild | broken) and llama_said (what to tell: one line or clause).
  local status=0 signal
  llama_said=$(.venv/bin/python -m rxagent.model.llama_check 2>.venv/llama-check.log) || status=$?
  llama_verdict=rebuild
  if [ "$status" -gt 128 ]; then
    signal=SIG$(kill -l "$((status - 128))" 2>/dev/null) || signal="signal $((status - 128))"
    llama_said="llama.cpp crashed ($signal) running the embedded model on this CPU"
  elif [ "$status" -eq 3 ]; then
    llama_said="$llama_said (details in .venv/llama-check.log)"
  elif [ "$status" -eq 0 ]; then
    llama_verdict=runs
  elif [ "$status" -eq 4 ]; then
    # Compiled for one kind of CPU (an older set-up's -march=native): it runs here, but pip's cache would
    # hand it to every later install. Kept when your own CMAKE_ARGS asked for it, or after a rebuild.
    if [ -n "$_rxagent_user_cmake_args" ] || [ "$1" = rebuilt ]; then llama_verdict=runs; fi
  else
    llama_verdict=broken
    llama_said="the set-up's check of the embedded model could not run (exit status $status): $llama_said"
  fi
}

_rxagent_check_llama() {
  # The installed llama.cpp must run here: a wheel compiled for another CPU otherwise ends `rxagent run` in
  # a bare segfault. Rebuilt once, with the flags above and pip's cached wheel removed (pip keeps the first
  # wheel it built, whatever its flags); if that fails too, say what to run and stop.
  local attempt again
  for attempt in first rebuilt; do
    _rxagent_judge_llama "$attempt"
    case "$llama_verdict" in
      runs) echo "$llama_said" >&2 && return 0 ;;
      broken) cat .venv/llama-check.log >&2 && echo "$llama_said" >&2 && return 1 ;;
    esac
    [ "$attempt" = first ] || break
    echo "$llama_said: removing pip's cached llama-cpp-python wheel and compiling it again with portable flags." >&2
    .venv/bin/python -m pip cache remove llama_cpp_python >/dev/null 2>&1 || true # none cached, or no cache
    .venv/bin/python -m pip uninstall -qq -y llama-cpp-python >&2
    _rxagent_install_with_progress
  done
  case ",$extras," in *,test,*) again="bash scripts/test.sh" ;; *) again="bash scripts/main.sh" ;; esac
  {
    echo "$llama_said, even compiled with portable flags."
    echo "To see where: .venv/bin/python -X faulthandler -m rxagent.model.llama_check"
    if [ -n "$_rxagent_user_cmake_args" ]; then
      echo "Your CMAKE_ARGS ($_rxagent_user_cmake_args) were part of that build; without them: env -u CMAKE_ARGS $again"
    fi
    case "$(uname -m)" in
      x86_64 | amd64)
        echo "If this CPU lacks AVX2 (older than Intel Haswell or AMD Excavator), compile for x86-64-v2:"
        echo "  CMAKE_ARGS='-DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF' $again"
        ;;
    esac
  } >&2
  return 1
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
if _rxagent_wants_llama && [ ! -f "$checked" ]; then
  _rxagent_check_llama
  touch "$checked"
fi

_rxagent_install_test_programs() {
  # What the `test` extras' tests drive besides Python, from Debian: Chromium for the dashboard's browser
  # tests (with Playwright; Playwright's own browser download is not used) and bubblewrap for the shell
  # tool's sandbox tests. Installed once, when missing, in one apt-get run; a failure is reported here and
  # those tests then say why they cannot run (CI fails them; never a silent skip).
  local chromium="${RXAGENT_CHROMIUM:-/usr/bin/chromium}" bwrap="${RXAGENT_BWRAP:-/usr/bin/bwrap}"
  local missing=() sudo="" started
  [ -x "$chromium" ] || missing+=(chromium)
  [ -x "$bwrap" ] || missing+=(bubblewrap)
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      echo "the browser and sandbox tests need ${missing[*]}: install as root (apt-get install ${missing[*]})" >&2
      return 0
    fi
  fi
  started=$(date +%s)
  echo "installing ${missing[*]} (apt) for the browser and sandbox tests" >&2
  if $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >.venv/apt-install.log 2>&1; then
    echo "${missing[*]} installed in $(($(date +%s) - started)) s" >&2
  else
    tail -n 20 .venv/apt-install.log >&2 2>/dev/null || true
    echo "could not install ${missing[*]} (see .venv/apt-install.log): the tests that need it cannot run" >&2
  fi
}

_rxagent_install_js_clients() {
  # The JavaScript clients the serve tests drive (the official @ag-ui/client and the Vercel AI SDK's own code, from npm), each a folder of
  # tests/ pinned by its package-lock.json: installed with `npm ci` (the registry is needed then, never at
  # test time), once per version of the lock (a stamp in its node_modules remembers which). A failure is
  # reported here and those tests then say why they cannot run (CI fails them; never a silent skip).
  local lock dir stamp
  for lock in tests/*/*/package-lock.json; do
    [ -f "$lock" ] || continue # no such folder: the pattern is left as it is
    dir=$(dirname "$lock")
    stamp="$dir/node_modules/.rxagent-$(sha256sum "$lock" | cut -c1-16)"
    [ -f "$stamp" ] && continue
    if ! command -v npm >/dev/null 2>&1; then
      echo "the tests in $dir need Node.js 20 or later with npm: install them, then set up again" >&2
      continue
    fi
    echo "installing $dir's JavaScript packages (npm ci)" >&2
    if (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) >.venv/npm-install.log 2>&1; then
      touch "$stamp"
    else
      tail -n 20 .venv/npm-install.log >&2
      echo "could not install $dir's packages (see .venv/npm-install.log): the tests that need them cannot run" >&2
    fi
  done
}

case ",$extras," in *,test,*) _rxagent_install_test_programs; _rxagent_install_js_clients ;; esac
