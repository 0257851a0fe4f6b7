// SPDX-License-Identifier: Apache-2.0

package provider

// Packet functions: a tenant's NF in an image, which chains name; it has no process of its own.

import (
	"context"
	"fmt"
	"log"
	"strconv"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/nfcatalog"
)

// deployNF records a packet function with the NF its image adds to keel-nf (name and argument
// schemas), which chains naming the function are checked against.
func (p *Provider) deployNF(ctx context.Context, f *chain.Function) error {
	fd := &f.Deployment
	if p.Library != nil && p.Library.Lookup(fd.Service) != nil {
		return fmt.Errorf("%w: service: %s is the name of a library NF; name the packet function differently", ErrInvalid, fd.Service)
	}
	if v := label(fd, chain.LabelCycles); v != "" {
		if c, err := strconv.ParseFloat(v, 64); err != nil || c <= 0 {
			return fmt.Errorf("%w: labels.%s: %q is not a positive number of cycles per packet", ErrInvalid, chain.LabelCycles, v)
		}
	}
	if v := label(fd, chain.LabelStateful); v != "" && v != "true" && v != "false" {
		return fmt.Errorf("%w: labels.%s: %q is not true or false", ErrInvalid, chain.LabelStateful, v)
	}
	// As for a normal function: a packet function whose image is missing is refused at deploy,
	// not when a chain that names it first starts an instance (issue 18 item 4).
	if err := p.checkImage(ctx, fd.Image); err != nil {
		return err
	}
	var err error
	switch ann := annotation(fd, chain.AnnotationNF); {
	case p.Images != nil:
		if f.NF, err = nfcatalog.Describe(ctx, p.Images, fd.Image, fd.Service); err != nil {
			return fmt.Errorf("%w: image: %v", ErrInvalid, err)
		}
	case ann != "":
		if f.NF, err = nfcatalog.FromAnnotation(ann); err != nil {
			return fmt.Errorf("%w: annotations.%s: %v", ErrInvalid, chain.AnnotationNF, err)
		}
	default:
		log.Printf("packet function %s: no container engine and no %s annotation: it takes no arguments", fd.Service, chain.AnnotationNF)
	}
	return p.Store.Put(ctx, f)
}

// tenantNF is a deployed packet function as chains see it.
func tenantNF(f *chain.Function) chain.TenantNF {
	t := chain.TenantNF{Name: f.Deployment.Service, Image: f.Deployment.Image, NF: f.NF}
	t.Cycles, _ = strconv.ParseFloat(label(&f.Deployment, chain.LabelCycles), 64)
	if v := label(&f.Deployment, chain.LabelStateful); v != "" {
		stateful := v == "true"
		t.Stateful = &stateful
	}
	return t
}
