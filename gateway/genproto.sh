#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Generates the Go stubs of proto/keel/v1 into gateway/internal/pb/keel/v1 (not committed).
# Usage: gateway/genproto.sh PYTHON   (a python with grpcio-tools, e.g. .venv/bin/python)
# Needs protoc-gen-go and protoc-gen-go-grpc in $(go env GOPATH)/bin or on PATH.
set -eu
py=${1:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
gobin=$(go env GOBIN); [ -n "$gobin" ] || gobin=$(go env GOPATH)/bin
pkg=github.com/keel-nfv/keel/gateway/internal/pb/keel/v1
out=$root/gateway/internal/pb
mkdir -p "$out"
m="Mkeel/v1/placer.proto=$pkg;keelv1,Mkeel/v1/control.proto=$pkg;keelv1"
"$py" -m grpc_tools.protoc -I "$root/proto" \
  --plugin=protoc-gen-go="$gobin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$gobin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=paths=source_relative,"$m" \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative,"$m" \
  keel/v1/placer.proto keel/v1/control.proto
