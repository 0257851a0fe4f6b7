// SPDX-License-Identifier: Apache-2.0

// Package pcapfilter compiles pcap-filter expressions with libpcap and matches flows against them.
package pcapfilter

/*
#cgo LDFLAGS: -lpcap
#include <pcap/pcap.h>
#include <stdlib.h>

static int keel_compile(const char *expr, struct bpf_program *prog, char *err, size_t errlen) {
	pcap_t *p = pcap_open_dead(DLT_EN10MB, 65535);
	if (!p) return -1;
	int rc = pcap_compile(p, prog, expr, 1, PCAP_NETMASK_UNKNOWN);
	if (rc != 0) {
		snprintf(err, errlen, "%s", pcap_geterr(p));
	}
	pcap_close(p);
	return rc;
}

static int keel_match(struct bpf_program *prog, const unsigned char *pkt, unsigned int len) {
	struct pcap_pkthdr h = {0};
	h.caplen = len;
	h.len = len;
	return pcap_offline_filter(prog, &h, pkt);
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"unsafe"
)

// Filter is a compiled pcap-filter expression for Ethernet frames.
type Filter struct {
	mu   sync.Mutex
	prog C.struct_bpf_program
	expr string
}

// Compile compiles expr as libpcap would for an Ethernet capture; the error is libpcap's message.
func Compile(expr string) (*Filter, error) {
	if expr == "" {
		return nil, errors.New("empty filter")
	}
	cexpr := C.CString(expr)
	defer C.free(unsafe.Pointer(cexpr))
	var errbuf [C.PCAP_ERRBUF_SIZE]C.char
	f := &Filter{expr: expr}
	if C.keel_compile(cexpr, &f.prog, &errbuf[0], C.size_t(len(errbuf))) != 0 {
		return nil, errors.New(C.GoString(&errbuf[0]))
	}
	runtime.SetFinalizer(f, func(f *Filter) { C.pcap_freecode(&f.prog) })
	return f, nil
}

// Flow is an IPv4 5-tuple.
type Flow struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Proto            uint8
}

// Match reports whether the first packet of the flow passes the filter.
func (f *Filter) Match(flow Flow) (bool, error) {
	pkt, err := packetOf(flow)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rc := C.keel_match(&f.prog, (*C.uchar)(unsafe.Pointer(&pkt[0])), C.uint(len(pkt)))
	return rc != 0, nil
}

// String returns the expression the filter was compiled from.
func (f *Filter) String() string { return f.expr }

// packetOf builds an Ethernet/IPv4 frame with a TCP, UDP or ICMP header for flow.
func packetOf(flow Flow) ([]byte, error) {
	if !flow.Src.Is4() || !flow.Dst.Is4() {
		return nil, fmt.Errorf("flow %v -> %v: only IPv4 is supported", flow.Src, flow.Dst)
	}
	l4 := 8
	if flow.Proto == 6 {
		l4 = 20
	}
	pkt := make([]byte, 14+20+l4)
	binary.BigEndian.PutUint16(pkt[12:], 0x0800)
	ip := pkt[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+l4))
	ip[8] = 64
	ip[9] = flow.Proto
	src, dst := flow.Src.As4(), flow.Dst.As4()
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	l := ip[20:]
	switch flow.Proto {
	case 6, 17:
		binary.BigEndian.PutUint16(l[0:], flow.SrcPort)
		binary.BigEndian.PutUint16(l[2:], flow.DstPort)
		if flow.Proto == 6 {
			l[12] = 5 << 4
			l[13] = 0x02
		} else {
			binary.BigEndian.PutUint16(l[4:], 8)
		}
	case 1:
		l[0] = 8
	}
	return pkt, nil
}
