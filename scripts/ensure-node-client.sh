#!/usr/bin/env bash
# Install what building the TypeScript client needs (clients/typescript: tsc and the frameworks' type
# declarations, as pinned in its package-lock.json), so the tests can `npm pack` it. Node and npm come
# from Debian if missing; the client needs Node 20 or newer.
set -eu
cd "$(dirname "$0")/../clients/typescript"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "ensure-node-client: installing Debian's nodejs and npm" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >&2
  $SUDO apt-get install -y -q --no-install-recommends nodejs npm >&2
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "ensure-node-client: the TypeScript client needs Node 20 or newer; this is $(node --version)" >&2
  exit 1
fi

# Installed already, and not older than the lock file: nothing to do.
if [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error >&2
