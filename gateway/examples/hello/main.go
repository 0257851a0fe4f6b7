// SPDX-License-Identifier: Apache-2.0

// hello is a normal HTTP function for stack.yml: it answers on :8080 (the OpenFaaS watchdog
// port) with a greeting, the replica's host name and the request body. With ?spin=MS it
// first keeps a CPU busy for MS milliseconds (at most 10 s): a CPU-bound application for
// co-hosting tests. With ?secret=NAME it answers the secret mounted at
// /var/openfaas/secrets/NAME (faas-cli secret create; the function's stack.yml lists it).
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// spin keeps one CPU busy for d.
func spin(d time.Duration) {
	x := uint64(1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := 0; i < 1000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	if x == 0 {
		log.Print("unreachable")
	}
}

func main() {
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if ms, err := strconv.Atoi(r.URL.Query().Get("spin")); err == nil && ms > 0 {
			spin(time.Duration(min(ms, 10000)) * time.Millisecond)
		}
		if name := r.URL.Query().Get("secret"); name != "" {
			b, err := os.ReadFile("/var/openfaas/secrets/" + filepath.Base(name))
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			w.Write(b)
			return
		}
		fmt.Fprintf(w, "hello from %s: %s", host, body)
	})
	http.HandleFunc("/_/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	log.Fatal(http.ListenAndServe(":8080", nil))
}
