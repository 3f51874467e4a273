#!/usr/bin/env bash
# Install what is needed (idempotent), prepare the model, start the Seer Serve app in the
# background with serve_config.yaml, send a demo rollout, print where to look.
#   ./run.sh         start (or reuse a running app) and send the demo rollout
#   ./run.sh stop    stop the app
source "$(dirname "$0")/scripts/common.sh"
cd "$ROOT"
RUN_DIR="$ROOT/.run"
PID_FILE="$RUN_DIR/serve.pid"
LOG="$RUN_DIR/serve.log"
URL="http://127.0.0.1:8000"
mkdir -p "$RUN_DIR"

running() { [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

if [[ "${1:-}" == "stop" ]]; then
  if running; then
    say "stopping Serve app (pid $(cat "$PID_FILE"))"
    kill -TERM "$(cat "$PID_FILE")"
    for _ in $(seq 60); do running || break; sleep 1; done
  fi
  rm -f "$PID_FILE"
  exit 0
fi

ensure_venv
ensure_models

if running && curl -fs "$URL/healthz" >/dev/null 2>&1; then
  say "Serve app already running (pid $(cat "$PID_FILE"))"
else
  say "starting Serve app (serve_config.yaml); log: $LOG"
  nohup "$VENV/bin/seer" serve --config serve_config.yaml >"$LOG" 2>&1 &
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

say "sending a demo rollout (8 prompts x G=4 x 64 tokens) ..."
"$VENV/bin/seer" demo --url "$URL"

cat <<MSG

  Rollout API   POST $URL/v1/rollouts      (202 + job URLs; "wait": true for one call)
                GET  $URL/v1/rollouts/ID   status, GET .../groups NDJSON, DELETE cancels
  API docs      $URL/docs
  Health        GET  $URL/healthz          Metrics  GET $URL/metrics
  Serve log     $LOG
  Stop          ./run.sh stop
MSG
