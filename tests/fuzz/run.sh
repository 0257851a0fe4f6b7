#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs each libFuzzer harness of BIN for SECONDS from the checked-in corpus
# (tests/fuzz/corpus/<name>, read only) plus what earlier runs found
# (WORK/corpus/<name>), writes any crash to WORK/crashes/<name>-*, and
# prints each harness's executions. Exits 1 if a harness found a crash.
#   tests/fuzz/run.sh BIN WORK SECONDS [NAME...]
set -u
bin=$1 work=$2 secs=$3
shift 3
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(packet pktbuf nf config flowmove)
here=$(cd "$(dirname "$0")" && pwd)
failed=0
for name in "${names[@]}"; do
  mkdir -p "$work/corpus/$name" "$work/crashes"
  log="$work/$name.log"
  "$bin/fuzz_$name" -max_total_time="$secs" -print_final_stats=1 -max_len=4096 \
      -artifact_prefix="$work/crashes/$name-" "$work/corpus/$name" "$here/corpus/$name" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed=1
    echo "fuzz_$name: CRASH after ${execs:-?} executions ($log):"
    grep -m1 -E 'ERROR|invariant|terminate|what\(\)' "$log"
  else
    echo "fuzz_$name: ${execs:-?} executions in ${secs}s, ${cov:-cov ?}, no crash"
  fi
done
exit $failed
