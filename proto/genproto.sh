#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Generates the Go stubs of proto/keel/v1 next to the .proto files, as the Go package
# github.com/keel-nfv/keel/proto/keel/v1 (keelv1) that the gateway and the agent both
# import. The generated *.pb.go files are not committed.
# Usage: proto/genproto.sh PYTHON   (a python with grpcio-tools, e.g. .venv/bin/python)
# Needs protoc-gen-go and protoc-gen-go-grpc in $(go env GOPATH)/bin or on PATH.
set -eu
py=${1:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
gobin=$(go env GOBIN); [ -n "$gobin" ] || gobin=$(go env GOPATH)/bin
pkg=github.com/keel-nfv/keel/proto/keel/v1
m="Mkeel/v1/placer.proto=$pkg;keelv1,Mkeel/v1/control.proto=$pkg;keelv1,Mkeel/v1/coopsched.proto=$pkg;keelv1,Mkeel/v1/torctl.proto=$pkg;keelv1"
"$py" -m grpc_tools.protoc -I "$root/proto" \
  --plugin=protoc-gen-go="$gobin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$gobin/protoc-gen-go-grpc" \
  --go_out="$root/proto" --go_opt=paths=source_relative,"$m" \
  --go-grpc_out="$root/proto" --go-grpc_opt=paths=source_relative,"$m" \
  keel/v1/placer.proto keel/v1/control.proto keel/v1/coopsched.proto keel/v1/torctl.proto
