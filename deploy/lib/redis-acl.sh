#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Prints Redis' ACL file for keel's control plane (deploy/redis/users.acl.in: the default user
# off, keel-gateway, keel-agent), each user's password taken from DIR/redis-NAME (keel-NAME's),
# as its SHA-256 (#HEX): the file holds no password. A password file that is missing is made
# first: 32 random bytes as hex, mode 0600; one that exists is kept, so the stack's parts keep
# logging in across restarts. make up writes run/redis/users.acl with it; for Kubernetes:
#
#   deploy/lib/redis-acl.sh DIR > DIR/users.acl
#   kubectl -n keel create secret generic keel-redis --from-file=users.acl=DIR/users.acl \
#     --from-file=gateway=DIR/redis-gateway --from-file=agent=DIR/redis-agent
#
# usage: deploy/lib/redis-acl.sh DIR
set -euo pipefail

usage() { sed -n '/^# Prints/,/^# usage/p' "$0" | sed 's/^# \{0,1\}//'; }
case ${1:-} in
  -h|--help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
esac
dir=$1
template=$(dirname "${BASH_SOURCE[0]}")/../redis/users.acl.in
mkdir -p "$dir"
while read -r word user rest; do
  [ "$word" = user ] || continue
  if [[ $rest == *'{password}'* ]]; then
    file=$dir/redis-${user#keel-}
    if [ ! -s "$file" ]; then
      (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$file.tmp" && echo >> "$file.tmp" &&
        mv "$file.tmp" "$file")
    fi
    hash=$(head -n 1 "$file" | tr -d '[:space:]' | sha256sum | cut -d' ' -f1)
    rest=${rest//\{password\}/#$hash}
  fi
  printf 'user %s %s\n' "$user" "$rest"
done < "$template"
