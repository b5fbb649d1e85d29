package testutil

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSStub is a UDP DNS server on 127.0.0.1 that answers A and AAAA queries
// from a fixed table and records every name it is asked for, so tests can
// prove a name never reached a resolver.
type DNSStub struct {
	Addr netip.AddrPort

	conn    *net.UDPConn
	answers map[string][]netip.Addr // lower-case name without trailing dot
	mu      sync.Mutex
	queries []string
}

// NewDNSStub starts a stub answering names from answers; other names get
// NXDOMAIN.
func NewDNSStub(t testing.TB, answers map[string][]netip.Addr) *DNSStub {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &DNSStub{conn: conn, answers: answers}
	s.Addr = conn.LocalAddr().(*net.UDPAddr).AddrPort()
	go s.serve()
	t.Cleanup(func() { conn.Close() })
	return s
}

// Queries returns the names asked for so far (lower-case, no trailing dot),
// one entry per question received.
func (s *DNSStub) Queries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queries...)
}

// Asked reports whether name was ever queried.
func (s *DNSStub) Asked(name string) bool {
	for _, q := range s.Queries() {
		if q == name {
			return true
		}
	}
	return false
}

func (s *DNSStub) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		hdr, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
		s.mu.Lock()
		s.queries = append(s.queries, name)
		s.mu.Unlock()

		resp := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true, RecursionDesired: hdr.RecursionDesired, RecursionAvailable: true},
			Questions: []dnsmessage.Question{q},
		}
		addrs, ok := s.answers[name]
		if !ok {
			resp.Header.RCode = dnsmessage.RCodeNameError
		}
		for _, a := range addrs {
			rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
			switch {
			case q.Type == dnsmessage.TypeA && a.Is4():
				rh.Type = dnsmessage.TypeA
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
			case q.Type == dnsmessage.TypeAAAA && a.Is6():
				rh.Type = dnsmessage.TypeAAAA
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
		out, err := resp.Pack()
		if err != nil {
			continue
		}
		s.conn.WriteToUDPAddrPort(out, from)
	}
}
