#!/usr/bin/env bash
# Make sure `promtool` (Prometheus's rule checker) is there for the tests of
# examples/prometheus/gateway-alerts.yml: on PATH, or unpacked from Debian's
# `prometheus` package into var/tools/prometheus (only unpacked: no server is
# installed or started).
set -u
cd "$(dirname "$0")/.."
TOOLS=var/tools/prometheus
if command -v promtool >/dev/null 2>&1 || [ -x "$TOOLS/usr/bin/promtool" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-promtool: apt-get not found; put promtool on PATH (it ships with Prometheus)" >&2
  exit 1
fi
echo "promtool is missing; unpacking it from Debian's prometheus package into $TOOLS" >&2
download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
chmod 777 "$download"  # apt-get download drops to the _apt user
( cd "$download" && apt-get download -q prometheus >&2 ) || {
  apt-get update -q >&2 && ( cd "$download" && apt-get download -q prometheus >&2 )
} || { echo "ensure-promtool: apt-get download prometheus failed" >&2; exit 1; }
mkdir -p "$TOOLS"
dpkg-deb -x "$download"/prometheus_*.deb "$TOOLS" || { echo "ensure-promtool: unpacking failed" >&2; exit 1; }
"$TOOLS/usr/bin/promtool" --version >/dev/null
