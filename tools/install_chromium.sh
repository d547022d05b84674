#!/usr/bin/env bash
# Installs Debian's chromium for the browser test (tests/acceptance/test_gates_report_browser.py,
# driven by playwright through executable_path; playwright's own browser download is never used).
# Does nothing when /usr/bin/chromium is already there. apt-get only; sudo only when not root.
set -euo pipefail
CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "install_chromium: $CHROMIUM is installed"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_chromium: no $CHROMIUM and no apt-get; install Chromium at $CHROMIUM" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
if [ ! -x "$CHROMIUM" ]; then
  echo "install_chromium: apt-get installed chromium, but $CHROMIUM is missing" >&2
  exit 1
fi
echo "install_chromium: installed $CHROMIUM"
