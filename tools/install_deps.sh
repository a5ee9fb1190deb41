#!/usr/bin/env bash
# Installs the Debian packages hotmoe builds with (idempotent; uses sudo when not root).
set -euo pipefail
PKGS="build-essential cmake pkg-config gzip curl python3 python3-venv libcjson-dev libcivetweb-dev libpcre2-dev libutf8proc-dev libhwloc-dev libnuma-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "hotmoe: installing$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# libomp is not needed: gcc's libgomp ships with build-essential.
