#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Builds the two images the OpenFaaS-conformance tests deploy (tests/test_conformance.py,
# tests/conformance) into a dockerd, without any registry: no docker pull, no BuildKit. Each
# is a root file system put together from this machine's own files (deploy/lib/rootfs.sh)
# and loaded with `docker import`:
#
#   keel/test-watchdog    /fwatchdog (tests/conformance/watchdog, a small clone of OpenFaaS's
#                         classic watchdog) and the host's env, cat, sha512sum and sh with the
#                         libraries they need: stands in for the certifier's functions/alpine
#   keel/test-redirector  /handler (tests/conformance/redirector): 302 to $destination;
#                         stands in for the certifier's theaxer/redirector
#
# With --certifier both are also tagged as the names OpenFaaS's certifier deploys
# (functions/alpine:latest, theaxer/redirector:latest), so the certifier itself can run
# against `make up`'s dockerd. Running it again replaces the images (idempotent).
#
# usage: tests/conformance/images.sh [--certifier] DOCKER_SOCKET | unix://PATH | tcp://HOST:PORT
#   --certifier  also tag docker.io/functions/alpine:latest and docker.io/theaxer/redirector:latest
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/deploy/lib/rootfs.sh"
GO=$(command -v go || echo /usr/local/go/bin/go)
CERTIFIER=0
HOST_ARG=

die() { echo "images.sh: $*" >&2; exit 1; }
usage() { sed -n '/^# usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --certifier) CERTIFIER=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) [ -z "$HOST_ARG" ] || die "one dockerd only ('$HOST_ARG' and '$1')"; HOST_ARG=$1; shift ;;
  esac
done
[ -n "$HOST_ARG" ] || { usage >&2; exit 2; }
case $HOST_ARG in
  unix://*|tcp://*|ssh://*) export DOCKER_HOST=$HOST_ARG ;;
  *) export DOCKER_HOST=unix://$(realpath "$HOST_ARG") ;;
esac

command -v docker >/dev/null || die "the docker client is not installed (make deps installs docker.io)"
[ -x "$GO" ] || die "no go toolchain (looked for go in PATH and $GO)"
docker version >/dev/null 2>&1 || die "no dockerd answers at $DOCKER_HOST"

WORK=$(mktemp -d /var/tmp/keel-conformance-images.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# import_image IMAGE ALIASES DIR CHANGE...: loads DIR as IMAGE:latest and tags it as each of
# the space-separated ALIASES too (with --certifier, or when an alias names the image being
# replaced); the image it replaces is removed unless something still uses it.
import_image() {
  local image=$1 aliases=$2 dir=$3 old new alias size
  shift 3
  # An alias that named the image being replaced is moved to the new one (import_rootfs
  # removes the old image unless an alias still holds it: read the aliases first).
  old=$(docker image inspect -f '{{.Id}}' "$image:latest" 2>/dev/null || true)
  local follow=()
  for alias in $aliases; do
    if [ "$CERTIFIER" = 1 ] || { [ -n "$old" ] &&
        [ "$(docker image inspect -f '{{.Id}}' "$alias" 2>/dev/null || true)" = "$old" ]; }; then
      follow+=("$alias")
    fi
  done
  import_rootfs "$image" "$dir" "$@"
  new=$IMPORTED_NEW
  for alias in "${follow[@]}"; do
    docker tag "$new" "$alias"
    [ "$(docker image inspect -f '{{.Id}}' "$alias")" = "$new" ] || die "$alias does not resolve to $image"
  done
  if [ -n "$old" ] && [ "$old" != "$new" ]; then docker image rm "$old" >/dev/null 2>&1 || true; fi
  size=$(docker image inspect -f '{{.Size}}' "$new" | numfmt --to=si --suffix=B)
  echo "$image:latest  $size  ${new:7:12}"
  for alias in $aliases; do
    if [ "$(docker image inspect -f '{{.Id}}' "$alias" 2>/dev/null || true)" = "$new" ]; then
      echo "  also $alias"
    fi
  done
}

# build PKG OUT: a static binary of the Go command in tests/conformance/PKG.
build() {
  (cd "$ROOT" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags '-s -w' -o "$2" "./tests/conformance/$1") ||
    die "go build of tests/conformance/$1 failed"
}

start=$SECONDS

# keel/test-watchdog
rootfs_list elf /usr/bin/env /usr/bin/cat /usr/bin/sha512sum /bin/sh > "$WORK/watchdog.list"
mkroot "$WORK/watchdog" "$WORK/watchdog.list"
build watchdog "$WORK/watchdog/fwatchdog"
import_image keel/test-watchdog "docker.io/functions/alpine:latest" "$WORK/watchdog" \
  "ENV $PATH_ENV" 'ENTRYPOINT ["/fwatchdog"]' 'EXPOSE 8080' 'LABEL com.keel.image=test-watchdog'

# keel/test-redirector
: > "$WORK/redirector.list"
mkroot "$WORK/redirector" "$WORK/redirector.list"
build redirector "$WORK/redirector/handler"
import_image keel/test-redirector "docker.io/theaxer/redirector:latest" "$WORK/redirector" \
  "ENV $PATH_ENV" 'ENTRYPOINT ["/handler"]' 'EXPOSE 8080' 'LABEL com.keel.image=test-redirector'

echo "images built in $((SECONDS - start)) s"
