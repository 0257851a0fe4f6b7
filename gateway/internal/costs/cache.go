// SPDX-License-Identifier: Apache-2.0

package costs

import (
	"strconv"
	"strings"
	"sync"

	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// ChainModeler is what Cache wraps: Modeler, or anything that models a chain the same way.
type ChainModeler interface {
	Model(name string, nfs []string, p99us float64) (*policy.Model, error)
}

// Cache remembers the models its Modeler built, by chain name, server NFs and p99 bound, so
// that each is built once. Building one runs Galleon's batch and threshold rule over the
// queueing model (Config.Operating): about half a second of the shared core per chain here.
// The provider builds a chain's model when it is deployed (it refuses an SLO no load meets);
// with one Cache behind both, the controller takes that model instead of building it again,
// under its lock, the first time it indexes the chain. Errors are not kept: the next call
// tries again.
type Cache struct {
	Modeler ChainModeler

	mu     sync.Mutex // one model built at a time (they all run on the shared core)
	models map[string]*policy.Model
}

// maxCached bounds the cache: past it, it starts empty again (every deploy of a changed chain
// adds an entry; the live ones are built again on their next use).
const maxCached = 1024

// Model returns the chain's model, built by c.Modeler on the first call for these arguments.
// Each call gets its own copy of the Model (its Profile is shared and must not be changed).
func (c *Cache) Model(name string, nfs []string, p99us float64) (*policy.Model, error) {
	key := name + "\x00" + strings.Join(nfs, "\x00") + "\x00" + strconv.FormatFloat(p99us, 'g', -1, 64)
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.models[key]
	if !ok {
		var err error
		if m, err = c.Modeler.Model(name, nfs, p99us); err != nil {
			return nil, err
		}
		if c.models == nil || len(c.models) >= maxCached {
			c.models = map[string]*policy.Model{}
		}
		c.models[key] = m
	}
	cp := *m
	cp.Cost.NFCycles = append([]float64(nil), m.Cost.NFCycles...)
	return &cp, nil
}
