#!/usr/bin/env bash
# Installs the OpenAI Node.js SDK for the server's SDK test (tests/server/node/node_modules, ignored by
# git). Idempotent: does nothing when the locked version is already there. Called by the setup step;
# without node/npm it says so and succeeds (the SDK test then reports itself skipped).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "tests/server/node: node/npm not found; the OpenAI SDK test will be skipped" >&2
  exit 0
fi
# The locked versions of what the tests import (the SDK, and zod for zodResponseFormat).
wanted=$(node -e 'const p=require("./package-lock.json").packages; console.log(["openai","zod"].map(n=>p["node_modules/"+n].version).join(" "))')
have=$(node -e 'console.log(["openai","zod"].map(n=>{try{return require("./node_modules/"+n+"/package.json").version}catch(e){return ""}}).join(" "))')
if [ "$wanted" = "$have" ]; then
  exit 0
fi
echo "tests/server/node: installing openai and zod ($wanted)" >&2
npm ci --no-audit --no-fund --loglevel=error
