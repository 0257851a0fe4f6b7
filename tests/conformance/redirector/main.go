// SPDX-License-Identifier: Apache-2.0

// Command redirector is the entry point of keel/test-redirector, a test image of the
// conformance tests (tests/conformance), not part of keel: it stands in for the certifier's
// theaxer/redirector. Every request but /_/health is answered with 302 Found to $destination;
// /_/health with 200.
package main

import (
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	destination := os.Getenv("destination")
	if destination == "" {
		log.Fatal("Provide the redirect's target via the destination environment variable.")
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_/health" {
			w.Write([]byte("OK"))
			return
		}
		log.Printf("%s %s -> 302 %s", r.Method, r.URL.RequestURI(), destination)
		w.Header().Set("Location", destination)
		w.WriteHeader(http.StatusFound)
	})
	srv := &http.Server{Addr: ":8080", Handler: handler, ReadHeaderTimeout: 10 * time.Second}

	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	log.Printf("Listening on :8080, redirecting to %s", destination)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
