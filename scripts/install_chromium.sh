#!/usr/bin/env bash
# Debian's Chromium (and the CJK fonts of the glossary) for the website's checks: Playwright drives
# it and downloads no browser of its own. Does nothing where a chromium is already on PATH; needs
# root (apt-get) otherwise. `make site` and `make browser` run it.
set -euo pipefail
if command -v chromium >/dev/null; then
    exit 0
fi
echo "installing Debian's chromium for the browser checks"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk
