// SPDX-License-Identifier: Apache-2.0

// Package conformance runs OpenFaaS-conformance tests against a real keel-gateway whose
// functions are real Docker containers of keel/test-watchdog and keel/test-redirector
// (tests/conformance/images.sh). tests/test_conformance.py starts the gateway and its
// dockerd and passes them in the environment:
//
//	KEEL_CONFORMANCE_GATEWAY           the gateway's URL (the tests skip without it)
//	KEEL_CONFORMANCE_PASSWORD          the basic-auth password of user admin
//	KEEL_CONFORMANCE_DOCKER            the dockerd the gateway deploys into
//	KEEL_CONFORMANCE_WATCHDOG_IMAGE    the watchdog image (functions/alpine's stand-in)
//	KEEL_CONFORMANCE_REDIRECTOR_IMAGE  the redirector image (theaxer/redirector's stand-in)
//
// This file is a placeholder: it only checks that the gateway answers.
package conformance

import (
	"net/http"
	"os"
	"testing"
	"time"
)

type env struct {
	gateway, password, docker, watchdogImage, redirectorImage string
}

// config reads the environment; a test without a gateway to test skips.
func config(t *testing.T) env {
	t.Helper()
	e := env{
		gateway:         os.Getenv("KEEL_CONFORMANCE_GATEWAY"),
		password:        os.Getenv("KEEL_CONFORMANCE_PASSWORD"),
		docker:          os.Getenv("KEEL_CONFORMANCE_DOCKER"),
		watchdogImage:   os.Getenv("KEEL_CONFORMANCE_WATCHDOG_IMAGE"),
		redirectorImage: os.Getenv("KEEL_CONFORMANCE_REDIRECTOR_IMAGE"),
	}
	if e.gateway == "" {
		t.Skip("KEEL_CONFORMANCE_GATEWAY is unset: run these tests through tests/test_conformance.py (pytest), which starts keel-gateway and its dockerd")
	}
	return e
}

func TestImagesRun(t *testing.T) {
	e := config(t)
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(e.gateway + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/healthz: %s, want 200", e.gateway, resp.Status)
	}
	t.Logf("gateway %s healthy; images %s, %s in %s", e.gateway, e.watchdogImage, e.redirectorImage, e.docker)
}
