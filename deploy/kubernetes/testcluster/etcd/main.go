// Command etcd is etcd v3.6 built from its Go module for keel's
// API-server-level test (tests/k8s); the same entry point as the
// upstream etcd binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
