package dnsfilter

import (
	"io"
	"net"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/policy"
)

// fakeWriter is a dns.ResponseWriter that keeps the answer.
type fakeWriter struct {
	remote net.Addr
	msg    *dns.Msg
}

func (w *fakeWriter) LocalAddr() net.Addr         { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (w *fakeWriter) RemoteAddr() net.Addr        { return w.remote }
func (w *fakeWriter) WriteMsg(m *dns.Msg) error   { w.msg = m; _, err := m.Pack(); return err }
func (w *fakeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *fakeWriter) Close() error                { return nil }
func (w *fakeWriter) TsigStatus() error           { return nil }
func (w *fakeWriter) TsigTimersOnly(bool)         {}
func (w *fakeWriter) Hijack()                     {}
func (w *fakeWriter) Network() string             { return "udp" }

// FuzzServeDNS feeds arbitrary packets to the handler (in synthetic mode,
// so nothing leaves the test): it must never panic, and must always
// answer with the query's ID and a packable message.
func FuzzServeDNS(f *testing.F) {
	cfg, err := policy.Parse("f.yaml", []byte(testPolicy+"dns:\n  mode: synthetic\n  answer: [192.0.2.53]\n"))
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(cfg, Options{Audit: audit.New(io.Discard)})
	if err != nil {
		f.Fatal(err)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"api.allowed.test.", dns.TypeA}, {"x.wild.test.", dns.TypeAAAA}, {"evil.test.", dns.TypeANY}, {"_srv._tcp.txt.allowed.test.", dns.TypeSRV}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(4096, true)
		b, _ := m.Pack()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := new(dns.Msg)
		if req.Unpack(data) != nil {
			return // miekg/dns drops what it cannot parse before the handler
		}
		w := &fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
		s.ServeDNS(w, req)
		if w.msg == nil || w.msg.Id != req.Id || !w.msg.Response {
			t.Fatalf("no proper answer to %v: %v", req, w.msg)
		}
		if _, err := w.msg.Pack(); err != nil {
			t.Fatalf("answer does not pack: %v", err)
		}
	})
}
