#!/usr/bin/env bash
# Install what is needed (idempotent), prepare the model, start the Seer Serve app in the
# background with serve_config.yaml (serve_config.gpu.yaml when the gpu extra is installed:
# nvidia-smi sees a GPU, or SEER_EXTRA=gpu; one engine replica per GPU, at most 8) and the
# dashboard next to it, send a demo rollout, print where to look.
#   ./run.sh [SERVE OPTIONS]  start (or reuse a running app and dashboard), send the demo rollout;
#                             options go to `seer serve` (e.g. --policy verl for the baseline)
#   ./run.sh stop             stop the dashboard and the app
# SEER_DASHBOARD_PORT (default 8501) moves the dashboard.
source "$(dirname "$0")/scripts/common.sh"
cd "$ROOT"
RUN_DIR="${SEER_RUN_DIR:-$ROOT/.run}"  # pid files and logs
PID_FILE="$RUN_DIR/serve.pid"
LOG="$RUN_DIR/serve.log"
URL="http://127.0.0.1:8000"
DASH_PID_FILE="$RUN_DIR/dashboard.pid"
DASH_LOG="$RUN_DIR/dashboard.log"
DASH_PORT="${SEER_DASHBOARD_PORT:-8501}"
DASH_URL="http://127.0.0.1:$DASH_PORT"
mkdir -p "$RUN_DIR"

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
running() { alive "$PID_FILE"; }

# stop_pid NAME PID_FILE: SIGTERM, wait up to 60 s, then SIGKILL.
stop_pid() {
  if alive "$2"; then
    say "stopping $1 (pid $(cat "$2"))"
    kill -TERM "$(cat "$2")"
    for _ in $(seq 60); do alive "$2" || break; sleep 1; done
    alive "$2" && kill -KILL "$(cat "$2")"
  fi
  rm -f "$2"
}

if [[ "${1:-}" == "stop" ]]; then
  stop_pid dashboard "$DASH_PID_FILE"
  stop_pid "Serve app" "$PID_FILE"
  exit 0
fi

ensure_venv
ensure_models

if running && curl -fs "$URL/healthz" >/dev/null 2>&1; then
  say "Serve app already running (pid $(cat "$PID_FILE"))"
  (( $# == 0 )) || say "note: options $* not applied to the running app (./run.sh stop first)"
else
  SERVE_ARGS=(--config serve_config.yaml)
  if [[ "$(seer_extra)" == gpu ]]; then
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
    SERVE_ARGS=(--config serve_config.gpu.yaml --num-replicas "$(( gpus < 8 ? (gpus > 0 ? gpus : 1) : 8 ))")
  fi
  SERVE_ARGS+=("$@")
  say "starting Serve app (${SERVE_ARGS[*]}); log: $LOG"
  nohup "$VENV/bin/seer" serve "${SERVE_ARGS[@]}" >"$LOG" 2>&1 &
  echo $! >"$PID_FILE"
  # Every ~10 s: elapsed time and the serve log's last line worth showing (which deployment
  # starts, what the engine loads), without colours, Ray/vLLM prefixes or health-check chatter.
  last_event() {
    sed -E -e 's/\x1b\[[0-9;]*m//g' \
           -e 's/^\((ServeReplica:[^:]*:)?([^ ]+) pid=[0-9]+\) (\([^)]* pid=[0-9]+\) )?/\2: /' \
           -e 's/(INFO|WARNING|ERROR) [0-9-]+ [0-9:,]+ [^ ]+ [0-9a-z]+ ([0-9a-f-]+ )?-- //' \
           -e 's/(INFO|WARNING|ERROR) [0-9-]+ [0-9:.]+ \[[^]]*\] //' "$LOG" 2>/dev/null \
      | grep -v -E 'healthz|CALL (health|load)|GET / |endpoints|LongPoll|queue length|caused by a slow|Warning|hasattr|lookup\(|^[^ ]*:? *$' \
      | tail -1 | cut -c1-110 || true
  }
  t0=$SECONDS
  shown=$t0
  until curl -fs "$URL/healthz" >/dev/null 2>&1; do
    running || { say "Serve app exited; last lines of $LOG:"; tail -30 "$LOG" >&2; exit 1; }
    (( SECONDS - t0 > 600 )) && { say "Serve app not healthy after 600 s; see $LOG"; exit 1; }
    sleep 3
    if (( SECONDS - shown >= 10 )); then
      shown=$SECONDS
      say "starting ($((SECONDS - t0)) s; ~2 min on 2 CPU cores): $(last_event)"
    fi
  done
  say "Serve app healthy after $((SECONDS - t0)) s"
fi

if alive "$DASH_PID_FILE" && curl -fs "$DASH_URL/_stcore/health" >/dev/null 2>&1; then
  say "dashboard already running (pid $(cat "$DASH_PID_FILE"))"
else
  say "starting the dashboard on $DASH_URL; log: $DASH_LOG"
  nohup "$PY" -m streamlit run dashboard/streamlit_app.py --server.headless true \
    --server.address 127.0.0.1 --server.port "$DASH_PORT" --browser.gatherUsageStats false \
    -- --service-url "$URL" >"$DASH_LOG" 2>&1 &
  echo $! >"$DASH_PID_FILE"
  t0=$SECONDS
  until curl -fs "$DASH_URL/_stcore/health" >/dev/null 2>&1; do
    alive "$DASH_PID_FILE" \
      || { say "dashboard exited; last lines of $DASH_LOG:"; tail -20 "$DASH_LOG" >&2; exit 1; }
    (( SECONDS - t0 > 60 )) && { say "dashboard not up after 60 s; see $DASH_LOG"; exit 1; }
    sleep 1
  done
fi

say "sending a demo rollout (8 prompts x G=4 x 64 tokens) ..."
"$VENV/bin/seer" demo --url "$URL"

cat <<MSG

  Rollout API   POST $URL/v1/rollouts      (202 + job URLs; "wait": true for one call)
                GET  $URL/v1/rollouts/ID   status, GET .../groups NDJSON, DELETE (Bearer cancel_token) cancels
  API docs      $URL/docs
  Health        GET  $URL/healthz          Metrics  GET $URL/metrics
  Dashboard     $DASH_URL   (Now, Speculation, History, Tuning; docs/dashboard.md)
  Serve log     $LOG
  Dashboard log $DASH_LOG
  seer command  $VENV/bin/seer --help   (source .venv/bin/activate puts it on PATH)
  Baseline      ./run.sh stop; ./run.sh --policy verl   (seer-lab compare measures both)
  Stop          ./run.sh stop   (dashboard and app)
MSG
