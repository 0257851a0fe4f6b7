// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/keel-nfv/keel/internal/dockerlog"
)

// LogSource reads the lines of the containers that carry the labels in match.
type LogSource interface {
	Logs(ctx context.Context, match map[string]string, o dockerlog.Options) (<-chan dockerlog.Line, error)
}

// LogsHandler serves GET /logs?chain=NAME[&since=RFC3339][&tail=N][&follow=true]: the lines
// of this worker's NF containers of the chain as JSON lines (dockerlog.Line), for the
// gateway's `faas-cli logs CHAIN`.
func LogsHandler(worker string, src LogSource) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		chain := q.Get("chain")
		if chain == "" {
			http.Error(w, "chain: missing (GET /logs?chain=NAME)", http.StatusBadRequest)
			return
		}
		var o dockerlog.Options
		if v := q.Get("since"); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				http.Error(w, "since: "+err.Error(), http.StatusBadRequest)
				return
			}
			o.Since = &t
		}
		if v := q.Get("tail"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				http.Error(w, "tail: "+err.Error(), http.StatusBadRequest)
				return
			}
			o.Tail = n
		}
		o.Follow = q.Get("follow") == "true"
		lines, err := src.Logs(r.Context(), map[string]string{LabelWorker: worker, LabelChain: chain}, o)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		flusher, _ := w.(http.Flusher)
		enc := json.NewEncoder(w)
		for l := range lines {
			if enc.Encode(l) != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}
