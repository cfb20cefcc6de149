#!/usr/bin/env bash
# `make dist`: every artifact a user installs, built into dist/ (or $DIST_DIR), then listed:
#   approval-gateway (the server) and approval-gateway-client (the Python client): wheel + sdist each,
#   built by `python -m build` (the sdist first, then the wheel from it);
#   @approval-gateway/client (the TypeScript client): the tarball `npm pack` writes.
# DIST_ONLY=python builds the two Python distributions only (the tests' shortcut).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=$(mkdir -p "${DIST_DIR:-dist}" && cd "${DIST_DIR:-dist}" && pwd)
rm -rf "${OUT:?}"/*

"$PY" -m build --outdir "$OUT" . >&2
if [ -f clients/python/pyproject.toml ]; then
  "$PY" -m build --outdir "$OUT" clients/python >&2
else
  echo "make dist: clients/python/pyproject.toml is missing: the Python client is not built" >&2
fi
if [ "${DIST_ONLY:-}" != "python" ]; then
  bash scripts/ensure-node-client.sh
  (cd clients/typescript && npm pack --pack-destination "$OUT" --loglevel=error >/dev/null)
fi

echo "make dist wrote:"
for artifact in "$OUT"/*; do
  echo "  ${artifact#"$PWD"/}"
done
