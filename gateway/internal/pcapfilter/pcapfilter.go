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
	"regexp"
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

var (
	addrRe = regexp.MustCompile(`\b(\d{1,3}(?:\.\d{1,3}){3})(?:/(\d{1,2}))?`)
	portRe = regexp.MustCompile(`\bport(?:range)?\s+(\d{1,5})(?:-(\d{1,5}))?`)
)

// Overlap looks for a flow that both filters match and returns it. It tries the flows made of
// the addresses, networks, ports and protocols the two expressions name (each network's first,
// second, middle and last address, each port and its neighbours) and a few others, so a
// reported overlap is always real (the flow is a witness), and the overlaps of filters built
// from nets, hosts, ports and protocols, keel's usual traffic filters, are found. Filters that
// select by other fields may overlap unreported.
func Overlap(a, b *Filter) (Flow, bool) {
	var addrs []netip.Addr
	seenAddr := map[netip.Addr]bool{}
	addAddr := func(x netip.Addr) {
		if x.Is4() && !seenAddr[x] {
			seenAddr[x] = true
			addrs = append(addrs, x)
		}
	}
	ports := []uint16{}
	seenPort := map[uint16]bool{}
	addPort := func(p int) {
		if p >= 0 && p <= 65535 && !seenPort[uint16(p)] {
			seenPort[uint16(p)] = true
			ports = append(ports, uint16(p))
		}
	}
	for _, d := range []string{"198.18.0.1", "10.0.0.1", "0.0.0.1", "255.255.255.254"} {
		addAddr(netip.MustParseAddr(d))
	}
	for _, p := range []int{1024, 80, 53} {
		addPort(p)
	}
	for _, expr := range []string{a.expr, b.expr} {
		for _, m := range addrRe.FindAllStringSubmatch(expr, -1) {
			ip, err := netip.ParseAddr(m[1])
			if err != nil {
				continue
			}
			bits := 32
			if m[2] != "" {
				fmt.Sscan(m[2], &bits)
			}
			pfx, err := ip.Prefix(min(bits, 32))
			if err != nil {
				continue
			}
			first := pfx.Addr()
			last := lastAddr(pfx)
			addAddr(first.Next()) // a host address first: it makes the nicer witness
			if pfx.Bits() < 31 {
				mid := first.As4()
				mid[pfx.Bits()/8] |= 0x80 >> (pfx.Bits() % 8)
				addAddr(netip.AddrFrom4(mid))
			}
			addAddr(last.Prev())
			addAddr(first)
			addAddr(last)
		}
		for _, m := range portRe.FindAllStringSubmatch(expr, -1) {
			var lo, hi int
			fmt.Sscan(m[1], &lo)
			hi = lo
			if m[2] != "" {
				fmt.Sscan(m[2], &hi)
			}
			for _, p := range []int{lo - 1, lo, hi, hi + 1} {
				addPort(p)
			}
		}
	}
	for _, proto := range []uint8{17, 6, 1} {
		pp := ports
		if proto == 1 {
			pp = ports[:1]
		}
		for _, src := range addrs {
			for _, dst := range addrs {
				for _, sp := range pp {
					for _, dp := range pp {
						f := Flow{Src: src, Dst: dst, SrcPort: sp, DstPort: dp, Proto: proto}
						if ok, _ := a.Match(f); ok {
							if ok, _ := b.Match(f); ok {
								return f, true
							}
						}
					}
				}
			}
		}
	}
	return Flow{}, false
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) | (uint32(1)<<(32-p.Bits()) - 1)
	if p.Bits() == 0 {
		v = 0xffffffff
	}
	binary.BigEndian.PutUint32(a[:], v)
	return netip.AddrFrom4(a)
}

// String renders a flow as "udp 198.18.0.1:1024 -> 198.18.3.1:80".
func (f Flow) String() string {
	name := map[uint8]string{6: "tcp", 17: "udp", 1: "icmp"}[f.Proto]
	if f.Proto == 1 {
		return fmt.Sprintf("%s %s -> %s", name, f.Src, f.Dst)
	}
	return fmt.Sprintf("%s %s:%d -> %s:%d", name, f.Src, f.SrcPort, f.Dst, f.DstPort)
}
