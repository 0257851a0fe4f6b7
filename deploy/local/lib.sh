# SPDX-License-Identifier: Apache-2.0
# Shared by up.sh and down.sh: where the local stack keeps its state, and how a process the
# stack started is recognised. Sourced, not run.
#
# run/ (repo-relative, gitignored):
#   NAME.pid   the PID of each process make up started, written right after the fork: a
#              process that started after its PID file was written is not ours (a recycled
#              PID), nor is one without NAME's program in its command line
#   NAME.log   its stdout and stderr
#   redis/     Redis' data directory (appendonly) and ACL file users.acl, redis.sock its unix
#              socket
#   ovs/       the private Open vSwitch: conf.db, db.sock, OVS' own pidfiles, control
#              sockets and logs (OVS_RUNDIR, OVS_DBDIR, OVS_LOGDIR point here)
#   secrets/   the gateway's basic-auth-user and basic-auth-password, the control-plane token,
#              the Redis passwords of keel-gateway and keel-agent (redis-gateway, redis-agent),
#              and in nf/ each chain instance's Redis login (keel-agent --secrets-dir)
#   dockerd/   only when make up started dockerd: dockerd's own pidfile
#   pktbuf.mounted   present when make up mounted the chain-buffer tmpfs

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUN=$ROOT/run
PKTBUF=/run/keel/pktbuf
COOPSCHED_SOCK=/run/keel/coopsched.sock         # the admin socket: the agent's
COOPSCHED_NF_SOCK=/run/keel/coopsched-nf.sock   # the NF socket: mounted into NF containers
NF_SECRETS=$RUN/secrets/nf
DOCKER_SOCK=/var/run/docker.sock
MANAGED_CORES=1
export OVS_RUNDIR=$RUN/ovs OVS_DBDIR=$RUN/ovs OVS_LOGDIR=$RUN/ovs

# The components, in start order. Each one's marker is a word of its command line.
COMPONENTS=(redis dockerd ovsdb-server ovs-vswitchd keel-place keel-gateway keel-coopsched keel-agent keel-torctl keel-ingress)
declare -A MARKER=([redis]=redis-server [dockerd]=dockerd [ovsdb-server]=ovsdb-server
  [ovs-vswitchd]=ovs-vswitchd [keel-place]=keel-place [keel-gateway]=keel-gateway
  [keel-coopsched]=keel-coopsched [keel-agent]=keel-agent [keel-torctl]=keel-torctl [keel-ingress]=keel-ingress
  [prometheus]=prometheus)

say() { printf '%s\n' "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }

# started PID: when the process started, in seconds since the epoch; empty if it is gone or
# a zombie.
started() {
  local stat btime
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }              # the fields after "(comm) "; comm may hold spaces
  set -- $stat
  [ "$1" != Z ] || return 0      # field 3, the state
  btime=$(awk '$1 == "btime" {print $2}' /proc/stat)
  printf '%s' $((btime + ${20} / CLK_TCK))   # field 22, clock ticks since boot
}
CLK_TCK=$(getconf CLK_TCK)

# ours NAME PID: true if PID runs and started no later than run/NAME.pid was written (give or
# take 2 s: both times are whole seconds, and btime may be a second off).
ours() {
  local start
  start=$(started "$2")
  [ -n "$start" ] && [ "$start" -le $(($(stat -c %Y "$RUN/$1.pid" 2>/dev/null || echo 0) + 2)) ]
}

# alive NAME: prints the PID of NAME if its PID file names a live process that the stack
# started (see ours) with NAME's program in its command line; fails otherwise.
alive() {
  local name=$1 pid
  read -r pid 2>/dev/null < "$RUN/$name.pid" || return 1
  [[ $pid =~ ^[0-9]+$ ]] && ours "$name" "$pid" || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "${MARKER[$name]}" || return 1
  printf '%s' "$pid"
}

# logtail NAME: the last lines of NAME's log, indented.
logtail() {
  local log=$RUN/$1.log
  [ -s "$log" ] || { say "    ($log is empty or missing)"; return 0; }
  say "    --- last lines of $log"
  tail -n 20 "$log" | sed 's/^/    /'
}

# redis_cli ARG...: redis-cli logged in as keel-gateway (its password through the environment,
# not the command line).
redis_cli() { REDISCLI_AUTH=$(cat "$RUN/secrets/redis-gateway") redis-cli --user keel-gateway "$@"; }

docker_answers() { docker -H "unix://$DOCKER_SOCK" version >/dev/null 2>&1; }
