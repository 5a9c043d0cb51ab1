#!/usr/bin/env bash
# Installs the Debian packages Sluice builds and tests with. Idempotent: packages already present are
# skipped, so a second run costs one dpkg query. Uses sudo when not root.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libboost-dev libboost-program-options-dev libboost-system-dev
  rapidjson-dev
  libssl-dev ca-certificates
  ocl-icd-opencl-dev opencl-clhpp-headers opencl-c-headers libclblast-dev pocl-opencl-icd clinfo
  liburing-dev libpcre2-dev libutf8proc-dev libspdlog-dev libfmt-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-dev llvm
  prometheus python3 python3-matplotlib python3-yaml python3-jsonschema fio curl
  haproxy nginx
  podman runc mmdebstrap
  chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Node.js and npm (for the OpenAI SDK tests) usually come with the machine; take Debian's only when absent.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)

if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The OpenAI Node.js SDK used by the server's end-to-end test (npm registry; locked version).
bash "$(dirname "$0")/../tests/server/node/install.sh"
# puppeteer-core, which drives Chromium (above) through the web app's browser test (locked version).
bash "$(dirname "$0")/../tests/webapp/browser/install.sh"
