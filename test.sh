#!/usr/bin/env bash
# Install the test dependencies (idempotent) and run the whole test suite.
# Extra arguments go to pytest, e.g. ./test.sh tests/core -x
source "$(dirname "$0")/scripts/common.sh"
cd "$ROOT"
t0=$SECONDS
ensure_venv
ensure_models >/dev/null
ensure_chromium
ensure_postgres
say "ruff + mypy ..."
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check . >/dev/null || { "$VENV/bin/ruff" format --diff . | head -40; exit 1; }
"$VENV/bin/mypy" >/dev/null || { "$VENV/bin/mypy"; exit 1; }
say "pytest ..."
set +e
"$PY" -m pytest -q -ra --timeout=900 "$@"
rc=$?
set -e
say "test.sh finished in $((SECONDS - t0)) s (pytest exit $rc)"
exit $rc
