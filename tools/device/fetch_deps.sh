#!/usr/bin/env bash
# Run HERE (not on the device): downloads the Debian packages the GPU box lacks (cJSON, civetweb,
# utf8proc, PCRE2 headers) and unpacks them into .deps/root, which `run` carries to the device.
set -euo pipefail
cd "$(dirname "$0")/../.."
PKGS="libcjson1 libcjson-dev libcivetweb1 libcivetweb-dev libutf8proc2 libutf8proc-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3"
rm -rf .deps && mkdir -p .deps/debs .deps/root
(cd .deps/debs && apt-get download $PKGS >/dev/null)
for d in .deps/debs/*.deb; do dpkg -x "$d" .deps/root; done
rm -rf .deps/debs
du -sh .deps
