#!/usr/bin/env bash
# The vLLM GPU path, end to end, on a machine with at least one NVIDIA GPU (never in CI; the
# device tool runs it where a task has one). Bounded at every step; prints one JSON summary
# (and writes it to ${OUT:-.run}/gpu_check.json):
#   1. install the gpu extra (vllm from PyPI) and prepare the model;
#   2. seer serve --config serve_config.gpu.yaml --num-replicas 1: the replica must report a
#      GPU (healthz gpu_ids), then one rollout through it (tokens/s);
#   3. seer exactness --json: grouped speculation on vs off on the GPU engine;
#   4. python -m lab.bench.speculation_methods --json: none vs ngram vs grouped, side by side.
# Usage: scripts/gpu_check.sh            (SEER_GPU_CHECK_PORT moves the app off 8000)
set -uo pipefail
export SEER_EXTRA=gpu
source "$(dirname "$0")/common.sh"
cd "$ROOT"
OUT_DIR="${OUT:-$ROOT/.run}"
mkdir -p "$OUT_DIR"
PORT="${SEER_GPU_CHECK_PORT:-8000}"
URL="http://127.0.0.1:$PORT"
RES="$OUT_DIR/gpu_check"
mkdir -p "$RES"
t0=$SECONDS

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$RES/gpus.txt" 2>&1 \
  || { say "no GPU: nvidia-smi failed"; cat "$RES/gpus.txt"; exit 1; }
ensure_venv
ensure_models >/dev/null

say "serve (1 GPU replica) ..."
"$VENV/bin/seer" serve --config serve_config.gpu.yaml --num-replicas 1 --port "$PORT" \
  >"$RES/serve.log" 2>&1 &
serve_pid=$!
ready=0
for _ in $(seq 600); do
  kill -0 "$serve_pid" 2>/dev/null || break
  if grep -q "ready in" "$RES/serve.log" && curl -fs "$URL/healthz" -o "$RES/healthz.json" \
      && "$PY" -c "import json,sys; sys.exit(json.load(open('$RES/healthz.json'))['status']!='ok')"; then
    ready=1; break
  fi
  sleep 1
done
if [[ $ready == 1 ]]; then
  curl -fs -m 600 "$URL/v1/rollouts" -H 'content-type: application/json' -o "$RES/rollout.json" \
    -d '{"prompts": ["Explain speculative decoding.", "Write a haiku about GPUs.", "What is 17*23?", "List three prime numbers."], "group_size": 8, "max_tokens": 256, "wait": true}' \
    || say "rollout failed"
fi
kill -TERM "$serve_pid" 2>/dev/null; timeout 120 tail --pid="$serve_pid" -f /dev/null || kill -KILL "$serve_pid"

say "exactness ..."
timeout 600 "$VENV/bin/seer" exactness --json >"$RES/exactness.json" 2>"$RES/exactness.log"
say "speculation_methods ..."
timeout 600 "$PY" -m lab.bench.speculation_methods --json >"$RES/spec_bench.json" 2>"$RES/spec_bench.log"

"$PY" - "$RES" "$((SECONDS - t0))" <<'PY' | tee "$OUT_DIR/gpu_check.json"
import json, sys
from pathlib import Path
res, wall = Path(sys.argv[1]), int(sys.argv[2])
def load(name):
    try:
        return json.loads((res / name).read_text())
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return {"error": f"{name}: {exc!r}"}
health, rollout = load("healthz.json"), load("rollout.json")
replicas = health.get("replicas", [])
out = {
    "gpus": (res / "gpus.txt").read_text().strip().splitlines(),
    "serve_ready": "status" in health,
    "replica_gpu_ids": [r.get("gpu_ids") for r in replicas],
    "rollout_stats": rollout.get("stats", rollout),
    "exactness": load("exactness.json"),
    "spec_bench": load("spec_bench.json"),
    "wall_s": wall,
}
out["ok"] = bool(
    out["serve_ready"] and replicas and all(r.get("gpu_ids") for r in replicas)
    and "groups" in rollout and out["exactness"].get("verdict") == "PASS"
)
print(json.dumps(out, indent=1))
sys.exit(0 if out["ok"] else 1)
PY
