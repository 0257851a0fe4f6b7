#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Writes the images deploy/kubernetes runs as image tarballs, one per image, without dockerd
# or a registry: each is a root file system put together from this machine's own files
# (Debian 12 after `make deps build`; deploy/lib/rootfs.sh, as deploy/local/images.sh does)
# packed as one layer with its config (imagetar.py: the Docker archive's manifest.json and an
# OCI layout, which `ctr images import` and `docker load` both read). Optionally imports them
# into a containerd for its kubelet (`ctr -a SOCKET -n k8s.io images import`).
#
#   keel/gateway    keel-gateway and keel-nf beside it (the NF catalogue and NF argument
#                   checks), their shared libraries; bench/results' measured chain and NF
#                   costs in /opt/keel, the working directory, where the gateway's defaults
#                   (--chain-costs, --nf-costs) find them; cat, for reading the generated
#                   basic-auth password (kubectl exec deploy/keel-gateway -- cat ...)
#   keel/agent      keel-agent and what it runs for VFs: ip, ovs-vsctl, ethtool, nsenter,
#                   sysctl (and /etc/iproute2)
#   keel/coopsched  keel-coopsched
#   keel/placer     keel-place: the venv's base interpreter in /usr/local, its standard
#                   library, the placer's Python dependencies from the venv, keel_placer in
#                   /opt/keel/placer (pyroot.py), the NF catalogue (keel-chain --list --json)
#                   in /opt/keel/build and bench/results/nf_profile.json, where keel-place's
#                   defaults find them from the working directory /opt/keel, and keel-torctl's
#                   openflow_nfs.json
#   keel/torctl     keel-torctl the same way: os-ken, grpcio, prometheus-client and
#                   keel_torctl in /opt/keel/ingress/torctl with openflow_nfs.json
#   keel/ingress    keel-ingress, DPDK's PMD plugins, their shared libraries
#   keel/nf-base    what deploy/local/images.sh builds: keel-nf, DPDK's PMD plugins, their
#                   libraries (the image of every chain instance's NF containers)
#   keel/redis      Debian's redis-server and redis-cli, tagged with the Debian package's
#                   version (keel/redis:7.0.15-1-deb12u10, say: '~' is not allowed in a tag);
#                   protected mode off, as the official image builds it, so other Pods reach
#                   it. deploy/kubernetes-testcluster runs it instead of redis:7.4.
#   keel/hello      stack.yml's normal function, gateway/examples/hello built static with Go
#                   ($GO, else go), alone in its image as /hello (its Dockerfile's image)
#
# The keel images are tagged latest, as deploy/kubernetes names them. Python's byte code is
# compiled into the images (unchecked-hash .pyc). Every layer's files are in name order with
# mtime $SOURCE_DATE_EPOCH (default: the last commit's time), so the same inputs give the
# same digests. Each image's size and build time is printed and written to OUT/images.tsv.
#
# usage: deploy/kubernetes/testcluster/images.sh [--bin DIR] [--venv DIR] [--out DIR]
#                                                [--import SOCKET] [IMAGE...]
#   --bin DIR        keel's binaries (default $KEEL_BIN, else build/bin)
#   --venv DIR       the venv make build installed the placer and torctl into (default .venv)
#   --out DIR        where the tarballs go, IMAGE.tar (default build/images)
#   --import SOCKET  also import each into the containerd at SOCKET, namespace k8s.io
#   IMAGE            gateway agent coopsched placer torctl ingress nf-base redis hello
#                    (default all)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
HERE=$ROOT/deploy/kubernetes/testcluster
source "$ROOT/deploy/lib/rootfs.sh"
BIN=${KEEL_BIN:-$ROOT/build/bin}
VENV=$ROOT/.venv
OUT=$ROOT/build/images
SOCK=
ALL=(gateway agent coopsched placer torctl ingress nf-base redis hello)
WANT=()

die() { echo "images.sh: $*" >&2; exit 1; }
usage() { sed -n '/^# usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --bin) [ $# -ge 2 ] || die "--bin needs a directory"; BIN=$2; shift 2 ;;
    --venv) [ $# -ge 2 ] || die "--venv needs a directory"; VENV=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; OUT=$2; shift 2 ;;
    --import) [ $# -ge 2 ] || die "--import needs containerd's socket"; SOCK=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) [[ " ${ALL[*]} " == *" $1 "* ]] || die "no image '$1' (one of: ${ALL[*]})"; WANT+=("$1"); shift ;;
  esac
done
[ ${#WANT[@]} -gt 0 ] || WANT=("${ALL[@]}")
BIN=$(realpath "$BIN")
VENV=$(realpath "$VENV")

command -v dpkg-query >/dev/null || die "needs a Debian machine (dpkg-query): the images are made from its files"
for prog in keel-gateway keel-nf keel-agent keel-coopsched keel-ingress keel-chain; do
  [ -x "$BIN/$prog" ] || die "$BIN/$prog is missing: run make build (or give --bin DIR)"
done
for prog in keel-place keel-torctl python; do
  [ -x "$VENV/bin/$prog" ] || die "$VENV/bin/$prog is missing: run make build (or give --venv DIR)"
done
if [ -n "$SOCK" ]; then
  command -v ctr >/dev/null || die "ctr (containerd's client) is not installed"
  ctr -a "$SOCK" version >/dev/null 2>&1 || die "no containerd answers at $SOCK"
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)}

mkdir -p "$OUT"
OUT=$(realpath "$OUT")
WORK=$(mktemp -d /var/tmp/keel-k8s-images.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# The keel tree the venv's editable placer and torctl come from (generated gRPC code included).
TREE=$(cd "$("$VENV/bin/python" -c 'import keel_placer, os; print(os.path.dirname(keel_placer.__path__[0]))')/.." && pwd)
PYBASE=$("$VENV/bin/python" -c 'import sys; print(sys.base_prefix)')

# elf_root DIR NAME KEEL_BINARY... -- PROGRAM...: DIR holds keel's binaries (of --bin) in
# /usr/bin, the host's PROGRAMs where they are, and the shared libraries of both.
elf_root() {
  local dir=$1 name=$2 names=() keel=() f
  shift 2
  while [ "$1" != -- ]; do names+=("$1"); keel+=("$(realpath "$BIN/$1")"); shift; done
  shift
  rootfs_list elf "${keel[@]}" "$@" > "$WORK/$name.all"
  printf '%s\n' "${keel[@]#/}" | grep -vxF -f - "$WORK/$name.all" > "$WORK/$name.list"
  mkroot "$dir" "$WORK/$name.list"
  for f in "${names[@]}"; do install -m 0755 "$BIN/$f" "$dir/usr/bin/$f"; done
}

# python_root DIR NAME DIST: DIR holds the venv's interpreter, DIST's dependencies and DIST
# (pyroot.py), the shared libraries of every ELF file among them, and compiled byte code.
python_root() {
  local dir=$1 name=$2 dist=$3 stage=$WORK/$2.stage ver
  local out elves=()
  out=$("$VENV/bin/python" "$HERE/pyroot.py" "$stage" "$TREE" "$dist") || die "pyroot.py failed for $dist"
  mapfile -t elves <<< "$out"
  rootfs_list elf "${elves[@]/#/$stage/}" > "$WORK/$name.all"
  grep -v -e "^${stage#/}/" -e "^${PYBASE#/}/" "$WORK/$name.all" > "$WORK/$name.list"
  mkroot "$dir" "$WORK/$name.list"
  cp -a "$stage/." "$dir/"
  ver=$(basename "$(readlink -f "$dir/usr/local/bin/python3")")
  PYTHONHASHSEED=0 nice -n 19 "$dir/usr/local/bin/$ver" -m compileall -q -j 2 \
    --invalidation-mode unchecked-hash -s "$dir" -p / "$dir/usr/local/lib/$ver" "$dir/opt/keel" > /dev/null
  mkdir -p "$dir/opt/keel/ingress/torctl"
  cp "$TREE/ingress/torctl/openflow_nfs.json" "$dir/opt/keel/ingress/torctl/"
}

# since T: seconds since $EPOCHREALTIME was T, to a tenth.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# pack NAME REF DIR ARG...: writes DIR as image REF into OUT/NAME.tar (imagetar.py ARGs),
# imports it with --import, and records its size and build time.
pack() {
  local name=$1 ref=$2 dir=$3 out id size
  shift 3
  out=$(nice -n 19 python3 "$HERE/imagetar.py" "$dir" "$OUT/$name.tar" --ref "$ref" \
    --env "$PATH_ENV" --label "com.keel.image=$name" "$@") || die "imagetar.py failed for $name"
  read -r id size <<< "$out"
  if [ -n "$SOCK" ]; then
    ctr -a "$SOCK" -n k8s.io images import "$OUT/$name.tar" > /dev/null
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$ref" "$((size / 1048576))" "$(since "$t0")" "${id:7:12}" "$name.tar" |
    tee -a "$OUT/images.tsv"
  rm -rf "$dir"
}

build() {
  local d=$WORK/$1 t
  case $1 in
    gateway)
      # cat: the README reads the generated basic-auth password with kubectl exec ... cat.
      elf_root "$d" gateway keel-gateway keel-nf -- "$(command -v cat)"
      mkdir -p "$d/opt/keel/bench/results"
      cp "$ROOT/bench/results/chain_length.json" "$ROOT/bench/results/nf_profile.json" "$d/opt/keel/bench/results/"
      pack gateway keel/gateway:latest "$d" --entrypoint '["/usr/bin/keel-gateway"]' --workdir /opt/keel ;;
    agent)
      local tools=() t p
      for t in ip ovs-vsctl ethtool nsenter sysctl; do
        p=$(command -v "$t") || die "$t is not installed (make deps)"
        tools+=("$p")
      done
      elf_root "$d" agent keel-agent -- "${tools[@]}"
      cp -a /etc/iproute2 "$d/etc/"
      pack agent keel/agent:latest "$d" --entrypoint '["/usr/bin/keel-agent"]' ;;
    coopsched)
      elf_root "$d" coopsched keel-coopsched --
      pack coopsched keel/coopsched:latest "$d" --entrypoint '["/usr/bin/keel-coopsched"]' ;;
    placer)
      python_root "$d" placer keel-placer
      mkdir -p "$d/opt/keel/build" "$d/opt/keel/bench/results"
      "$BIN/keel-chain" --list --json > "$d/opt/keel/build/nf-catalog.json"
      cp "$ROOT/bench/results/nf_profile.json" "$d/opt/keel/bench/results/"
      pack placer keel/placer:latest "$d" --entrypoint '["/usr/local/bin/keel-place"]' --workdir /opt/keel ;;
    torctl)
      python_root "$d" torctl keel-torctl
      pack torctl keel/torctl:latest "$d" --entrypoint '["/usr/local/bin/keel-torctl"]' --workdir /opt/keel ;;
    ingress)
      dpdk_root "$d" "$BIN/keel-ingress" keel-ingress "$WORK"
      pack ingress keel/ingress:latest "$d" --entrypoint '["/usr/bin/keel-ingress"]' ;;
    nf-base)
      nf_base_root "$d" "$BIN" "$WORK"
      pack nf-base keel/nf-base:latest "$d" --entrypoint '["/usr/bin/keel-nf"]' ;;
    redis)
      local version
      version=$(dpkg-query -W -f='${Version}' redis-server 2>/dev/null) || die "redis-server is not installed (make deps)"
      version=${version#*:}
      elf_root "$d" redis -- "$(command -v redis-server)" "$(command -v redis-cli)"
      mkdir -p "$d/data"
      pack redis "keel/redis:${version//\~/-}" "$d" --workdir /data \
        --entrypoint '["/usr/bin/redis-server", "--protected-mode", "no"]' ;;
    hello)
      mkdir -p "$d"
      (cd "$ROOT/gateway" && CGO_ENABLED=0 nice -n 19 "${GO:-go}" build -trimpath -o "$d/hello" ./examples/hello) ||
        die "cannot build gateway/examples/hello (GO=${GO:-go})"
      pack hello keel/hello:latest "$d" --entrypoint '["/hello"]' ;;
  esac
}

printf 'image\tMiB\tseconds\tid\ttarball\n' | tee "$OUT/images.tsv"
start=$EPOCHREALTIME
for image in "${WANT[@]}"; do
  t0=$EPOCHREALTIME
  build "$image"
done
echo "images written to $OUT in $(since "$start") s${SOCK:+, imported into $SOCK (k8s.io)}"
