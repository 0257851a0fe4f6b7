#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Builds keel's base images for packet functions with the local dockerd (`make images`).
# No registry is reachable and BuildKit is absent, so nothing is pulled: both images are
# root file systems put together from this machine's own files (Debian 12, after
# `make deps build`) and loaded with `docker import`:
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

# Prints the files to copy, canonical (/lib/x → /usr/lib/x on merged-/usr systems), each
# symlink followed by every link of its chain. Modes:
#   elf FILE...   the files, the shared libraries they need (ldd) and the dynamic loader
#   deb PKG...    the files of the Debian packages and of everything they depend on
#                 (Depends, Pre-Depends; the first installed alternative), without docs
LIST_PY=$(cat <<'PY'
import os, re, subprocess, sys

out = set()

def add(path):
    while True:
        path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if path in out or not os.path.lexists(path):
            return
        if os.path.isdir(path) and not os.path.islink(path):
            return
        out.add(path)
        if not os.path.islink(path):
            return
        path = os.path.join(os.path.dirname(path), os.readlink(path))

def elf(files):
    missing = []
    for f in files:
        add(f)
        r = subprocess.run(["ldd", f], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            line = line.strip()
            if "=> not found" in line:
                missing.append(f"{f}: {line.split()[0]}")
            m = re.match(r"(?:\S+ => )?(/\S+) \(0x", line)
            if m:
                add(m.group(1))
    if missing:
        sys.exit("images.sh: shared libraries not found:\n  " + "\n  ".join(missing))

def deb(roots):
    q = subprocess.run(["dpkg-query", "-W", "-f=${binary:Package}\t${db:Status-Status}\t${Provides}\t"
                        "${Pre-Depends}, ${Depends}\n"], capture_output=True, text=True, check=True).stdout
    installed, provided = {}, {}
    for line in q.splitlines():
        pkg, status, provides, deps = line.split("\t")
        if status != "installed":
            continue
        name = pkg.split(":")[0]
        installed[name] = (pkg, deps)
        for p in provides.split(","):
            p = re.sub(r"\(.*?\)", "", p).strip().split(":")[0]
            if p:
                provided.setdefault(p, name)

    def pick(alternatives):
        for a in alternatives.split("|"):
            a = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", a).strip().split(":")[0]
            if a in installed:
                return a
            if a in provided:
                return provided[a]
        return None

    absent = [r for r in roots if r not in installed]
    if absent:
        sys.exit("images.sh: Debian packages not installed here: " + " ".join(absent) + " (make deps)")
    todo, seen = list(roots), set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for d in installed[p][1].split(","):
            if d.strip() and (r := pick(d)) and r not in seen:
                todo.append(r)
    skip = re.compile(r"^/usr/share/(doc|doc-base|man|info|locale|lintian|bug|bash-completion)/")
    for p in sorted(seen):
        files = subprocess.run(["dpkg-query", "-L", installed[p][0]], capture_output=True, text=True, check=True)
        for f in files.stdout.splitlines():
            if f.startswith("/") and not skip.match(f):
                add(f)

{"elf": elf, "deb": deb}[sys.argv[1]](sys.argv[2:])
print("\n".join(p.lstrip("/") for p in sorted(out)))
PY
)

# mkroot DIR LIST: copies the host's files named in LIST into DIR, with the host's
# merged-/usr top-level links and the directories every image needs.
mkroot() {
  local dir=$1 list=$2 d
  mkdir -p "$dir"/{usr/bin,usr/lib,usr/sbin,etc,tmp,run,var,proc,sys,dev}
  for d in bin lib lib64 sbin; do
    if [ -L /$d ]; then ln -s "$(readlink /$d)" "$dir/$d"; fi
  done
  [ -e /lib64 ] && [ ! -L /lib64 ] && mkdir -p "$dir/lib64"
  [ -L /lib64 ] && mkdir -p "$dir/$(readlink /lib64)"
  chmod 1777 "$dir/tmp"
  ln -s ../run "$dir/var/run"    # DPDK's runtime directory lives in /var/run/dpdk
  printf 'hosts: files dns\n' > "$dir/etc/nsswitch.conf"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' > "$dir/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$dir/etc/group"
  tar -C / --no-recursion -cf - -T "$list" | tar -C "$dir" -xpf -
}

# import_image IMAGE DIR CHANGE...: loads DIR as IMAGE:latest; the image it replaces is removed
# unless something still uses it.
import_image() {
  local image=$1 dir=$2 old new
  shift 2
  local changes=()
  for c in "$@"; do changes+=(--change "$c"); done
  old=$(docker image inspect -f '{{.Id}}' "$image:latest" 2>/dev/null || true)
  tar -C "$dir" --numeric-owner -cf - . | docker import "${changes[@]}" - "$image:latest" >/dev/null
  new=$(docker image inspect -f '{{.Id}}' "$image:latest")
  if [ -n "$old" ] && [ "$old" != "$new" ]; then docker image rm "$old" >/dev/null 2>&1 || true; fi
  echo "$image:latest  $(du -sh "$dir" | cut -f1)  ${new:7:12}"
}

PATH_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
start=$SECONDS

# keel/nf-base
eal=$(ldd "$BIN/keel-nf" | awk '/librte_eal\.so/ {print $3}')
[ -n "$eal" ] || die "$BIN/keel-nf does not link DPDK's librte_eal"
pmds=$(grep -ao '/[A-Za-z0-9_/.-]*/dpdk/pmds-[0-9.]*' "$eal" | head -1)
[ -d "$pmds" ] || die "DPDK's PMD plugin directory ($pmds, from $eal) is missing"
keel_nf=$(realpath "$BIN/keel-nf")
python3 -c "$LIST_PY" elf "$keel_nf" "$pmds"/* | grep -vxF "${keel_nf#/}" > "$WORK/base.list"
mkroot "$WORK/base" "$WORK/base.list"
install -m 0755 "$BIN/keel-nf" "$WORK/base/usr/bin/keel-nf"
import_image keel/nf-base "$WORK/base" "ENV $PATH_ENV" 'ENTRYPOINT ["/usr/bin/keel-nf"]' \
  'LABEL com.keel.image=nf-base'

# keel/nf-sdk
python3 -c "$LIST_PY" deb g++ dash coreutils nlohmann-json3-dev > "$WORK/sdk.list"
mkroot "$WORK/sdk" "$WORK/sdk.list"
mkdir -p "$WORK/sdk/usr/local/include" "$WORK/sdk/src"
cp -r "$ROOT/nf-runtime/include/keel" "$WORK/sdk/usr/local/include/keel"
import_image keel/nf-sdk "$WORK/sdk" "ENV $PATH_ENV" 'WORKDIR /src' 'CMD ["g++", "--version"]' \
  'LABEL com.keel.image=nf-sdk'

echo "images built in $((SECONDS - start)) s"
