package audit

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestQueryKeysKeepsOnlyKeys(t *testing.T) {
	cases := []struct{ raw, want string }{
		{"", ""},
		{"a=1&b=secret", "a&b"},
		{"token=ghp_abcdef&x=", "token&x"},
		{"SECRET_BARE_TOKEN&k=V", "-&k"},    // a bare part may be the secret
		{"sig%3DSECRET_SIG&a%20b=1", "-&-"}, // encoded characters: not a plain name
		{"=onlyvalue&&k=", "-&k"},
		{"X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA", "X-Amz-Signature&X-Amz-Credential"},
		{"items[]=1", "items[]"},
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=1", "-"},
	}
	for _, tc := range cases {
		if got := QueryKeys(tc.raw); got != tc.want {
			t.Errorf("QueryKeys(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		if got := QueryKeys(tc.raw); strings.Contains(got, "secret") || strings.Contains(got, "SECRET") || strings.Contains(got, "deadbeef") {
			t.Errorf("QueryKeys(%q) kept a value", tc.raw)
		}
	}
	long := strings.Repeat("k=v&", 100)
	if n := strings.Count(QueryKeys(long), "&"); n != 32 {
		t.Errorf("QueryKeys kept %d separators for 100 keys, want 32 (+ \"...\")", n)
	}
}

func TestLogWritesOneLineWithOpenTelemetryNames(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf)
	l.Log(&Event{
		Kind: KindRequest, Start: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), Sandbox: "agent-1",
		Client: netip.MustParseAddrPort("[::ffff:10.0.0.7]:40000"), Method: "GET", Scheme: "http",
		Host: "pypi.org", Port: 443, Path: "/simple/", Query: "a", Status: 200, Decision: "allow",
		Reason: "allowed", Rule: "policies.default.allow[4]", Peer: netip.MustParseAddr("151.101.0.223"),
		BytesSent: 10, BytesReceived: 2048, Duration: 1500 * time.Microsecond,
	})
	if strings.Count(buf.String(), "\n") != 1 {
		t.Fatalf("want one line, got %q", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"time": "2026-11-29T12:00:00Z", "event": "http.request", "sandbox": "agent-1",
		"client.address": "10.0.0.7", "client.port": 40000.0, "http.request.method": "GET",
		"url.scheme": "http", "server.address": "pypi.org", "server.port": 443.0, "url.path": "/simple/",
		"url.query": "a", "http.response.status_code": 200.0, "decision": "allow", "reason": "allowed",
		"rule": "policies.default.allow[4]", "network.peer.address": "151.101.0.223", "intercepted": false,
		"bytes_sent": 10.0, "bytes_received": 2048.0, "duration_ms": 1.5,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v (%T), want %v", k, m[k], m[k], v)
		}
	}
	for k := range m {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected field %s", k)
		}
	}
}

func TestPathDropsPathParameters(t *testing.T) {
	cases := []struct{ in, want string }{
		{"/a/b", "/a/b"},
		{"/x;SECRET=1", "/x;-"},
		{"/a;jsessionid=XYZ/b;v=2/c", "/a;-/b;-/c"},
		{"/" + strings.Repeat("a", 3000), "/" + strings.Repeat("a", 2047) + "..."},
	}
	for _, tc := range cases {
		if got := Path(tc.in); got != tc.want {
			t.Errorf("Path(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
