#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the dashboard's browser test (tests/testsuite/dashboard.rs):
# Debian's `chromium` and `chromium-driver` packages, installed once (needs root or sudo), then found on
# the PATH. Prints the chromedriver path; prints nothing and fails where they cannot be installed.
set -euo pipefail
if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
fi
command -v chromedriver
