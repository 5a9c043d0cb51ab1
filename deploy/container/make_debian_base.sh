#!/bin/bash
# Makes the Containerfile's base images, debian:12 and debian:12-slim, from Debian's own archive with
# mmdebstrap — for hosts that reach a Debian mirror but no container registry (as this project's
# machines do), and for builds that should not trust a registry. Skips an image that already exists.
#   bash deploy/container/make_debian_base.sh [podman|docker]
set -euo pipefail
tool=${1:-podman}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
have() { "$tool" image inspect "$1" > /dev/null 2>&1; }
if have docker.io/library/debian:12 && have docker.io/library/debian:12-slim; then exit 0; fi
command -v mmdebstrap > /dev/null || { echo "make_debian_base: mmdebstrap is missing (apt-get install mmdebstrap)" >&2; exit 1; }
tar=$(mktemp --suffix=.tar)
trap 'rm -f "$tar"' EXIT
# minbase: the Required packages and apt; no documentation or locales, as the registry's -slim image.
mmdebstrap --quiet --variant=minbase --dpkgopt='path-exclude=/usr/share/{doc,man,info,locale}/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' bookworm "$tar" "$mirror"
"$tool" import --change 'CMD ["bash"]' "$tar" docker.io/library/debian:12 > /dev/null
"$tool" tag docker.io/library/debian:12 docker.io/library/debian:12-slim
echo "make_debian_base: debian:12 and debian:12-slim made from $mirror"
