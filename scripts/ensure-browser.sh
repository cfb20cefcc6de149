#!/usr/bin/env bash
# Make sure Debian's headless-capable Chromium is at /usr/bin/chromium (the
# browser tests drive it through Playwright; they never download a browser).
set -u
BROWSER=/usr/bin/chromium

if [ -x "$BROWSER" ]; then
  exit 0
fi

echo "Chromium is missing at $BROWSER; installing Debian's chromium package" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
  else
    echo "ensure-browser: need root (or sudo) to apt-get install chromium; install it yourself: apt-get install chromium" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-browser: apt-get not found; install Chromium so that $BROWSER exists" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2 || { echo "ensure-browser: apt-get update failed" >&2; exit 1; }
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-liberation >&2 || {
  echo "ensure-browser: apt-get install chromium failed" >&2
  exit 1
}
if [ ! -x "$BROWSER" ]; then
  echo "ensure-browser: chromium was installed but $BROWSER is still missing" >&2
  exit 1
fi
echo "Chromium installed: $("$BROWSER" --version 2>/dev/null || echo "$BROWSER")" >&2
