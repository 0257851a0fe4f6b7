// SPDX-License-Identifier: Apache-2.0

// Command watchdog is the entry point of keel/test-watchdog, the image the conformance tests
// (tests/conformance) deploy in place of OpenFaaS's functions/alpine. It is a test image's
// watchdog, not part of keel: a small stand-in for OpenFaaS's classic watchdog, written from
// its documented behaviour, so the tests need no registry.
//
// Every request but GET /_/health forks the command in $fprocess (split on spaces, no shell),
// writes the request body to its stdin and answers with its stdout (200), or with the error
// and its stderr (500) when it fails or outlives $exec_timeout (default 10s). The process
// sees the watchdog's environment plus the request as Http_* variables (CGI style), and the
// log lines ("Forking fprocess.", "Wrote N Bytes - Duration: ...") are classic watchdog's.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// ready is set once the server listens and cleared when it shuts down.
var ready atomic.Bool

// duration reads env var name as whole seconds ("10") or a Go duration ("1m30s").
func duration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		log.Fatalf("%s=%q: neither seconds nor a duration", name, v)
	}
	return d
}

// requestEnv is the process's environment: the watchdog's own plus the request's Http_*.
func requestEnv(r *http.Request) []string {
	env := os.Environ()
	for name, values := range r.Header {
		env = append(env, "Http_"+strings.ReplaceAll(name, "-", "_")+"="+values[0])
	}
	env = append(env, "Http_Method="+r.Method,
		fmt.Sprintf("Http_ContentLength=%d", r.ContentLength),
		fmt.Sprintf("Http_Content_Length=%d", r.ContentLength))
	if len(r.TransferEncoding) > 0 {
		env = append(env, "Http_Transfer_Encoding="+r.TransferEncoding[0])
	}
	if r.URL.RawQuery != "" {
		env = append(env, "Http_Query="+r.URL.RawQuery)
	}
	if r.URL.Path != "" {
		env = append(env, "Http_Path="+r.URL.Path)
	}
	if r.Host != "" {
		env = append(env, "Http_Host="+r.Host)
	}
	return env
}

// fork runs fprocess for one request.
func fork(argv []string, timeout time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		log.Println("Forking fprocess.")
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = requestEnv(r)
		cmd.Stdin = bytes.NewReader(body)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = time.Second // a grandchild holding the pipes does not hold the request
		err = cmd.Run()
		if stderr.Len() > 0 {
			log.Printf("stderr: %s", stderr.Bytes())
		}
		if ctx.Err() == context.DeadlineExceeded {
			log.Printf("Killing process: %s (exec_timeout %s)", strings.Join(argv, " "), timeout)
			err = fmt.Errorf("killed process after exec_timeout %s", timeout)
		}
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "%s\n%s", err, stderr.Bytes())
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		took := time.Since(start).Seconds()
		w.Header().Set("X-Duration-Seconds", fmt.Sprintf("%f", took))
		w.WriteHeader(http.StatusOK)
		w.Write(stdout.Bytes())
		log.Printf("Wrote %d Bytes - Duration: %f seconds", stdout.Len(), took)
	}
}

func health(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method != http.MethodGet:
		w.WriteHeader(http.StatusMethodNotAllowed)
	case !ready.Load():
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		w.Write([]byte("OK"))
	}
}

func main() {
	fprocess := strings.TrimSpace(os.Getenv("fprocess"))
	if fprocess == "" {
		log.Fatal("Provide a valid process via fprocess environmental variable.")
	}
	argv := strings.Fields(fprocess)
	port := os.Getenv("port")
	if port == "" {
		port = "8080"
	}
	timeout := duration("exec_timeout", 10*time.Second)

	run := fork(argv, timeout)
	// No ServeMux: it would redirect unclean paths instead of handing them to fprocess.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_/health" {
			health(w, r)
			return
		}
		run(w, r)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}

	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("Listening on :%s, fprocess %q, exec_timeout %s", port, fprocess, timeout)
	lock := os.TempDir() + "/.lock"
	log.Printf("Writing lock-file to: %s", lock)
	if err := os.WriteFile(lock, nil, 0o660); err != nil {
		log.Printf("lock-file: %v", err)
	}
	ready.Store(true)

	stopped := make(chan struct{})
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		log.Printf("SIGTERM received.. shutting down server")
		ready.Store(false)
		os.Remove(lock)
		ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			log.Printf("shutdown: %v", err)
		}
		close(stopped)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	<-stopped
	log.Printf("No new connections allowed. Exiting.")
}
