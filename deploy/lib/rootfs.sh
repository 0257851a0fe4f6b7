# SPDX-License-Identifier: Apache-2.0
# Root file systems of keel's images, put together from this machine's own files (Debian 12,
# after `make deps build`): shared by deploy/local/images.sh (docker import) and
# deploy/kubernetes/testcluster/images.sh (image tarballs for containerd). Sourced, not run;
# the caller defines die.

ROOTFS_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The PATH every image's config sets.
PATH_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# rootfs_list elf FILE... | rootfs_list deb PKG...: prints the host files to copy, relative to
# / (rootfs.py says how they are chosen).
rootfs_list() { python3 "$ROOTFS_LIB/rootfs.py" "$@"; }

# import_rootfs IMAGE DIR CHANGE...: loads DIR as IMAGE:latest into the dockerd of
# $DOCKER_HOST with docker import (each CHANGE a Dockerfile line, docker import --change) and
# removes the image it replaces unless something still uses it. Sets IMPORTED_OLD and
# IMPORTED_NEW to the image IDs before ("" : none) and after.
import_rootfs() {
  local image=$1 dir=$2 c
  shift 2
  local changes=()
  for c in "$@"; do changes+=(--change "$c"); done
  IMPORTED_OLD=$(docker image inspect -f '{{.Id}}' "$image:latest" 2>/dev/null || true)
  tar -C "$dir" --numeric-owner -cf - . | docker import "${changes[@]}" - "$image:latest" >/dev/null
  IMPORTED_NEW=$(docker image inspect -f '{{.Id}}' "$image:latest")
  if [ -n "$IMPORTED_OLD" ] && [ "$IMPORTED_OLD" != "$IMPORTED_NEW" ]; then
    docker image rm "$IMPORTED_OLD" >/dev/null 2>&1 || true
  fi
}

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

# pmd_dir BINARY: prints DPDK's PMD plugin directory of the librte_eal BINARY links, which
# EAL loads the drivers of --vdev from.
pmd_dir() {
  local eal pmds
  eal=$(ldd "$1" | awk '/librte_eal\.so/ {print $3}')
  [ -n "$eal" ] || die "$1 does not link DPDK's librte_eal"
  pmds=$(grep -ao '/[A-Za-z0-9_/.-]*/dpdk/pmds-[0-9.]*' "$eal" | head -1)
  [ -d "$pmds" ] || die "DPDK's PMD plugin directory ($pmds, from $eal) is missing"
  printf '%s' "$pmds"
}

# dpdk_root DIR BINARY NAME WORK: DIR holds BINARY as /usr/bin/NAME, DPDK's PMD plugins, the
# shared libraries of both and the dynamic loader (lists in WORK).
dpdk_root() {
  local dir=$1 bin=$2 name=$3 work=$4 real pmds
  pmds=$(pmd_dir "$bin")
  real=$(realpath "$bin")
  rootfs_list elf "$real" "$pmds"/* | grep -vxF "${real#/}" > "$work/$name.list"
  mkroot "$dir" "$work/$name.list"
  install -m 0755 "$bin" "$dir/usr/bin/$name"
}

# nf_base_root DIR BIN WORK: keel/nf-base's root file system in DIR: keel-nf of BIN (which
# holds the whole NF library) in /usr/bin, DPDK's PMD plugins, the shared libraries of both,
# the dynamic loader. Its entry point is /usr/bin/keel-nf.
nf_base_root() {
  [ -x "$2/keel-nf" ] || die "$2/keel-nf is missing: run make build (or give --bin DIR)"
  dpdk_root "$1" "$2/keel-nf" keel-nf "$3"
}

# nf_sdk_root DIR ROOT WORK: keel/nf-sdk's root file system in DIR: g++ and everything its
# Debian packages depend on, /bin/sh, coreutils, nlohmann json headers, the headers of keel
# (checkout ROOT) in /usr/local/include/keel and the working directory /src.
nf_sdk_root() {
  local dir=$1 root=$2 work=$3
  rootfs_list deb g++ dash coreutils nlohmann-json3-dev > "$work/sdk.list"
  mkroot "$dir" "$work/sdk.list"
  mkdir -p "$dir/usr/local/include" "$dir/src"
  cp -r "$root/nf-runtime/include/keel" "$dir/usr/local/include/keel"
}
