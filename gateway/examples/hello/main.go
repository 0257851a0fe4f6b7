// SPDX-License-Identifier: Apache-2.0

// hello is a normal HTTP function for stack.yml: it answers on :8080 (the OpenFaaS watchdog
// port) with a greeting, the replica's host name and the request body.
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
)

func main() {
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		fmt.Fprintf(w, "hello from %s: %s", host, body)
	})
	http.HandleFunc("/_/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	log.Fatal(http.ListenAndServe(":8080", nil))
}
