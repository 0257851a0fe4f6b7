// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/internal/dockerlog"
)

type fakeLogs struct {
	match map[string]string
	opts  dockerlog.Options
}

func (f *fakeLogs) Logs(_ context.Context, match map[string]string, o dockerlog.Options) (<-chan dockerlog.Line, error) {
	f.match, f.opts = match, o
	out := make(chan dockerlog.Line, 2)
	out <- dockerlog.Line{Container: "keel-chain2-0-0", Time: time.Unix(1, 0).UTC(), Text: "keel-nf: urlfilter up"}
	out <- dockerlog.Line{Container: "keel-chain2-0-1", Time: time.Unix(2, 0).UTC(), Text: "keel-nf: encrypt up"}
	close(out)
	return out, nil
}

func Test_LogsHandler_streams_the_chains_NF_containers_of_this_worker(t *testing.T) {
	src := &fakeLogs{}
	h := LogsHandler("w1", src)
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/logs?chain=chain2&tail=5&follow=true&since=2026-11-23T10:00:00Z", nil))
	if rec.Code != 200 || src.match[LabelChain] != "chain2" || src.match[LabelWorker] != "w1" || src.opts.Tail != 5 ||
		!src.opts.Follow || src.opts.Since == nil || src.opts.Since.Hour() != 10 {
		t.Fatalf("%d %v %+v", rec.Code, src.match, src.opts)
	}
	var texts []string
	dec := json.NewDecoder(rec.Body)
	for dec.More() {
		var l dockerlog.Line
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, l.Container+": "+l.Text)
	}
	if strings.Join(texts, "|") != "keel-chain2-0-0: keel-nf: urlfilter up|keel-chain2-0-1: keel-nf: encrypt up" {
		t.Fatalf("%q", texts)
	}
	for q, want := range map[string]string{"/logs": "chain: missing", "/logs?chain=c&tail=x": "tail:", "/logs?chain=c&since=yesterday": "since:"} {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodGet, q, nil))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d %q", q, rec.Code, rec.Body.String())
		}
	}
}
