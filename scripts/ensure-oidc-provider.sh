#!/usr/bin/env bash
# Install the local OpenID Connect provider the sign-in tests run (tests/oidc: panva's oidc-provider,
# as pinned in package-lock.json) under node. Node and npm come from Debian if missing.
set -eu
cd "$(dirname "$0")/../tests/oidc"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "ensure-oidc-provider: installing Debian's nodejs and npm" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >&2
  $SUDO apt-get install -y -q --no-install-recommends nodejs npm >&2
fi

# Installed already, and not older than the lock file: nothing to do.
if [ -d node_modules/oidc-provider ] && [ node_modules/oidc-provider -nt package-lock.json ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error >&2
