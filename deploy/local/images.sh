#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Builds keel's base images for packet functions with the local dockerd (`make images`).
# No registry is reachable and BuildKit is absent, so nothing is pulled: both images are
# root file systems put together from this machine's own files (Debian 12, after
# `make deps build`; deploy/lib/rootfs.sh) and loaded with `docker import`:
#
#   keel/nf-base  FROM-scratch runtime: keel-nf (which holds the whole NF library), the
#                 shared libraries it needs (ldd), DPDK's PMD plugin directory and the
#                 libraries those need, the dynamic loader. Entry point keel-nf, so
#                 `docker run keel/nf-base --nf acl=... ` runs any library NF.
#   keel/nf-sdk   what the packet-cpp template's build stage needs to compile a
#                 handler.cc into an NF .so: g++ (the Debian packages of this machine's
#                 g++ and everything they depend on, so the .so has the ABI of keel-nf),
#                 /bin/sh, coreutils, nlohmann json headers, keel's headers in
#                 /usr/local/include/keel.
#
# usage: deploy/local/images.sh [--bin DIR] [DOCKER_SOCKET | unix://PATH | tcp://HOST:PORT]
#   --bin DIR   where keel-nf is (default $KEEL_BIN, else build/bin)
#   the dockerd: the argument, else $DOCKER_HOST, else docker's default socket
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/deploy/lib/rootfs.sh"
BIN=${KEEL_BIN:-$ROOT/build/bin}
HOST_ARG=

die() { echo "images.sh: $*" >&2; exit 1; }
usage() { sed -n '/^# usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --bin) [ $# -ge 2 ] || die "--bin needs a directory"; BIN=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) [ -z "$HOST_ARG" ] || die "one dockerd only ('$HOST_ARG' and '$1')"; HOST_ARG=$1; shift ;;
  esac
done
case $HOST_ARG in
  "") ;;
  unix://*|tcp://*|ssh://*) export DOCKER_HOST=$HOST_ARG ;;
  *) export DOCKER_HOST=unix://$(realpath "$HOST_ARG") ;;
esac

command -v docker >/dev/null || die "the docker client is not installed (make deps installs docker.io)"
command -v dpkg-query >/dev/null || die "needs a Debian machine (dpkg-query): the images are made from its packages"
[ -x "$BIN/keel-nf" ] || die "$BIN/keel-nf is missing: run make build (or give --bin DIR)"
docker version >/dev/null 2>&1 || die "no dockerd answers at ${DOCKER_HOST:-the default socket} (start dockerd first)"

WORK=$(mktemp -d /var/tmp/keel-images.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# import_image IMAGE DIR CHANGE...: loads DIR as IMAGE:latest (import_rootfs) and says so.
import_image() {
  import_rootfs "$@"
  echo "$1:latest  $(du -sh "$2" | cut -f1)  ${IMPORTED_NEW:7:12}"
}

start=$SECONDS

# keel/nf-base
nf_base_root "$WORK/base" "$BIN" "$WORK"
import_image keel/nf-base "$WORK/base" "ENV $PATH_ENV" 'ENTRYPOINT ["/usr/bin/keel-nf"]' \
  'LABEL com.keel.image=nf-base'

# keel/nf-sdk
nf_sdk_root "$WORK/sdk" "$ROOT" "$WORK"
import_image keel/nf-sdk "$WORK/sdk" "ENV $PATH_ENV" 'WORKDIR /src' 'CMD ["g++", "--version"]' \
  'LABEL com.keel.image=nf-sdk'

echo "images built in $((SECONDS - start)) s"
