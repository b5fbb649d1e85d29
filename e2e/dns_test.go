package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlockhq/airlock/internal/testutil"
)

// dnsUpstream is a loopback DNS server answering name -> A records and
// recording every name asked.
func dnsUpstream(t *testing.T, answers map[string]string) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var asked []string
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		q := r.Question[0]
		mu.Lock()
		asked = append(asked, strings.ToLower(q.Name))
		mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		if ip, ok := answers[strings.ToLower(q.Name)]; ok && q.Qtype == dns.TypeA {
			rr, _ := dns.NewRR(fmt.Sprintf("%s 60 IN A %s", q.Name, ip))
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String(), func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), asked...) }
}

// The sandbox's resolver, driven with dig: allowed names answer, denied
// names are refused without a query upstream, and an allowed name that
// resolves to an internal address is answered empty.
func TestDigThroughAirlockDNS(t *testing.T) {
	dig := testutil.NeedTool(t, "dig")
	up, asked := dnsUpstream(t, map[string]string{
		"api.allowed.test.":  "203.0.113.7",
		"meta.allowed.test.": "169.254.169.254",
	})
	p := testutil.StartProxy(t, fmt.Sprintf(`
listen:
  dns: 127.0.0.1:0
network:
  allow_cidrs: [203.0.113.7/32]
  resolvers: [%q]
policies:
  default:
    allow:
      - host: api.allowed.test
      - host: meta.allowed.test
`, up))
	host, port, _ := net.SplitHostPort(p.DNSAddr)
	run := func(name string, extra ...string) string {
		out, err := exec.Command(dig, append([]string{"@" + host, "-p", port, "+tries=1", "+time=5", name, "A"}, extra...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %s: %v\n%s", name, err, out)
		}
		return string(out)
	}
	if out := run("API.allowed.test"); !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "203.0.113.7") {
		t.Errorf("allowed name:\n%s", out)
	}
	if out := run("evil.test"); !strings.Contains(out, "status: REFUSED") || !strings.Contains(out, "EDE: 18") {
		t.Errorf("denied name:\n%s", out)
	}
	if out := run("meta.allowed.test"); !strings.Contains(out, "status: NOERROR") || strings.Contains(out, "169.254.169.254") || !strings.Contains(out, "EDE: 15") {
		t.Errorf("rebinding to metadata:\n%s", out)
	}
	if out := run("api.allowed.test", "+tcp"); !strings.Contains(out, "203.0.113.7") {
		t.Errorf("over TCP:\n%s", out)
	}
	for _, n := range asked() {
		if strings.Contains(n, "evil") {
			t.Errorf("the denied name reached the upstream: %v", asked())
		}
	}
	// A reload applies to the resolver too: the name it adds is answered.
	if out := run("late.allowed.test"); !strings.Contains(out, "status: REFUSED") {
		t.Errorf("before the reload:\n%s", out)
	}
	cfg, _ := os.ReadFile(p.ConfigPath)
	writeAtomically(t, p.ConfigPath, strings.Replace(string(cfg), "      - host: meta.allowed.test\n", "      - host: meta.allowed.test\n      - host: late.allowed.test\n", 1))
	if !p.WaitStderr("configuration reloaded") {
		t.Fatalf("no reload:\n%s", p.Stderr())
	}
	if out := run("late.allowed.test"); !strings.Contains(out, "status: NOERROR") {
		t.Errorf("after the reload:\n%s", out)
	}
	found := false
	for _, ev := range p.WaitAudit(t, 4) {
		if ev["event"] == "dns.query" && ev["dns.question.name"] == "evil.test" {
			found = true
			wantFields(t, ev, map[string]any{"decision": "deny", "reason": "host_not_allowed", "dns.response_code": "REFUSED", "dns.question.type": "A"})
		}
	}
	if !found {
		t.Errorf("no audit line for the refused query:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
}
