// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"time"

	"github.com/keel-nfv/keel/gateway/internal/nfcatalog"
	"github.com/openfaas/faas-provider/types"
)

// Function is one deployed function of any kind, as the gateway's store keeps it.
type Function struct {
	Kind       string                   `json:"kind"` // "" (normal), nf or chain
	Deployment types.FunctionDeployment `json:"deployment"`
	Replicas   uint64                   `json:"replicas"`
	CreatedAt  time.Time                `json:"created_at"`
	Chain      *Chain                   `json:"chain,omitempty"`
	// NF is a packet function's NF as its image declares it (name, argument schemas).
	NF *nfcatalog.NF `json:"nf,omitempty"`
}

// RecordName names the function's record in the store (store.Record).
func (f *Function) RecordName() string { return f.Deployment.Service }
