#!/usr/bin/env bash
# Installs puppeteer-core for the web app's browser test (tests/webapp/browser/node_modules, ignored by
# git): it drives Debian's Chromium (the `chromium` package; puppeteer-core downloads no browser).
# Idempotent: does nothing when the locked version is already there. Called by tools/setup.sh; without
# node/npm it says so and succeeds (the browser test then fails, naming this script).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "tests/webapp/browser: node/npm not found; the web app's browser test cannot run" >&2
  exit 0
fi
wanted=$(node -e 'console.log(require("./package-lock.json").packages["node_modules/puppeteer-core"].version)')
have=$(node -e 'try{console.log(require("./node_modules/puppeteer-core/package.json").version)}catch(e){console.log("")}')
if [ "$wanted" = "$have" ]; then
  exit 0
fi
echo "tests/webapp/browser: installing puppeteer-core $wanted" >&2
npm ci --no-audit --no-fund --loglevel=error
