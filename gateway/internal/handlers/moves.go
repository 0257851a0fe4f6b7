// SPDX-License-Identifier: Apache-2.0

package handlers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/keel-nfv/keel/gateway/internal/controller"
	"github.com/openfaas/faas-provider/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// InstanceMover moves an instance's live flows to another instance of its chain
// (controller.Controller.MoveInstance).
type InstanceMover interface {
	MoveInstance(ctx context.Context, from, to string, batch, limit int) (*controller.MoveReport, error)
}

// MoveRequest is the body of POST /system/keel/moves.
type MoveRequest struct {
	From  string `json:"from"`  // the instance whose flows move (CHAIN/N)
	To    string `json:"to"`    // an attached instance of the same chain
	Batch int    `json:"batch"` // flows per move (one FLOWS_MOVE to the ingress); 0: DefaultMoveBatch
	Limit int    `json:"limit"` // move at most this many of from's flows; 0: all
}

// DefaultMoveBatch is a move's flows when the request does not say.
const DefaultMoveBatch = 100

// MakeMovesHandler serves POST /system/keel/moves: move the live flows of one instance to
// another with their state (issue 37), in batches, and answer what happened to each flow
// (controller.MoveReport). 400 for a malformed request, 404 for an unknown instance, 409
// when flow moves are off, the destination does not take flows or the chain's flows cannot
// move, 503 when Redis does not answer.
func MakeMovesHandler(mv InstanceMover) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req MoveRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, `request body: expected {"from": "CHAIN/N", "to": "CHAIN/M", "batch": N, "limit": N}: `+err.Error(), http.StatusBadRequest)
			return
		}
		if req.Batch == 0 {
			req.Batch = DefaultMoveBatch
		}
		rep, err := mv.MoveInstance(r.Context(), req.From, req.To, req.Batch, req.Limit)
		if err != nil {
			code := map[codes.Code]int{codes.InvalidArgument: http.StatusBadRequest, codes.NotFound: http.StatusNotFound,
				codes.FailedPrecondition: http.StatusConflict, codes.Unavailable: http.StatusServiceUnavailable}[status.Code(err)]
			if code == 0 {
				code = http.StatusInternalServerError
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		writeJSON(w, rep)
	}
}

// AddMoves serves POST /system/keel/moves on r (MakeMovesHandler), behind basic auth as every
// /system/ route (creds nil: none).
func AddMoves(r *mux.Router, mv InstanceMover, creds *auth.BasicAuthCredentials) {
	r.HandleFunc("/system/keel/moves", guardWith(creds)(MakeMovesHandler(mv))).Methods(http.MethodPost)
}
