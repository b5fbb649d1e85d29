package broker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/rs/zerolog"

	"github.com/airlockhq/airlock/policy"
)

const realToken = "ghs_REALSECRETVALUE_0123456789abcdef"

func TestSecretNeverPrints(t *testing.T) {
	s := NewSecret(realToken)
	var zbuf bytes.Buffer
	zl := zerolog.New(&zbuf)
	zl.Log().Interface("s", s).Msg("")
	j, _ := json.Marshal(map[string]any{"s": s})
	txt, _ := s.MarshalText()
	for _, out := range []string{
		fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q", s, s, s, s, s), fmt.Sprintf("%v", struct{ S Secret }{s}),
		zbuf.String(), string(j), string(txt),
	} {
		if strings.Contains(out, "REALSECRET") {
			t.Errorf("secret printed: %s", out)
		}
	}
	if s.Reveal() != realToken {
		t.Error("Reveal does not give the value")
	}
}

func parseCfg(t *testing.T, yaml string) *policy.Config {
	t.Helper()
	c, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newBroker(t *testing.T, source string, extra ...string) *Broker {
	t.Helper()
	cfg := parseCfg(t, strings.Join(append([]string{
		"credentials:",
		"  github:",
		"    source: " + source,
		"    hosts: [api.github.com, \"*.example.com\"]",
	}, extra...), "\n")+"\n")
	b, err := New(cfg, []byte("0123456789abcdef0123456789abcdef"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func host(t *testing.T, s string) policy.Host {
	h, err := policy.ParseHost(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestInjectReplacesTheSlotForBoundHostsOnly(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_TOKEN", realToken)
	b := newBroker(t, "{env: AIRLOCK_TEST_TOKEN}")
	r, _ := http.NewRequest("GET", "https://api.github.com/user", nil)
	r.Header.Add("Authorization", "Bearer placeholder-one")
	r.Header.Add("authorization", "Basic c29tZXRoaW5n") // a duplicate, another case
	inj, err := b.Inject(context.Background(), r, "default", "github", host(t, "api.github.com"), true)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+realToken {
		t.Errorf("Authorization = %q, want exactly the injected value", got)
	}
	if inj.Credential != "github" || strings.Contains(fmt.Sprintf("%v %+v", inj, inj), "REALSECRET") {
		t.Errorf("injection prints its values: %+v", inj)
	}

	r2, _ := http.NewRequest("GET", "https://evil.test/", nil)
	r2.Header.Set("Authorization", "Bearer x")
	if _, err := b.Inject(context.Background(), r2, "default", "github", host(t, "evil.test"), true); !errors.Is(err, ErrNotBound) {
		t.Errorf("unbound host: %v", err)
	}
	if r2.Header.Get("Authorization") != "" {
		t.Error("the slot of a refused request was left with the client's value")
	}
	if _, err := b.Inject(context.Background(), r, "default", "github", host(t, "api.github.com"), false); !errors.Is(err, ErrPlaintext) {
		t.Errorf("plaintext: %v", err)
	}
	if _, err := b.Inject(context.Background(), r, "default", "nope", host(t, "api.github.com"), true); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := b.Inject(context.Background(), r, "default", "github", host(t, "objects.example.com"), true); err != nil {
		t.Errorf("wildcard binding: %v", err)
	}
}

func TestInjectFormatAndPlaintextOptIn(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_TOKEN", realToken)
	b := newBroker(t, "{env: AIRLOCK_TEST_TOKEN}", "    inject: {header: X-Api-Key, format: \"key={token};v=1\"}", "    allow_plaintext: true")
	r, _ := http.NewRequest("GET", "http://api.github.com/", nil)
	if _, err := b.Inject(context.Background(), r, "default", "github", host(t, "api.github.com"), false); err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Get("X-Api-Key"); got != "key="+realToken+";v=1" {
		t.Errorf("X-Api-Key = %q", got)
	}
}

func TestSources(t *testing.T) {
	ctx := context.Background()
	t.Run("env unset", func(t *testing.T) {
		_, err := envSource{name: "c", env: "AIRLOCK_TEST_UNSET_VAR"}.Get(ctx, Request{})
		if !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
	})
	t.Run("file is re-read when it changes", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "token")
		os.WriteFile(path, []byte("first-value\n"), 0o600)
		s := &fileSource{name: "c", path: path}
		if v, err := s.Get(ctx, Request{}); err != nil || v.Reveal() != "first-value" {
			t.Fatalf("%v %v", v.Reveal(), err)
		}
		os.WriteFile(path, []byte("second-value-longer\n"), 0o600)
		if v, _ := s.Get(ctx, Request{}); v.Reveal() != "second-value-longer" {
			t.Fatalf("after rewrite: %q", v.Reveal())
		}
		os.Remove(path)
		if _, err := s.Get(ctx, Request{}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("missing file: %v", err)
		}
	})
	t.Run("command output is cached for its TTL and shared", func(t *testing.T) {
		counter := filepath.Join(t.TempDir(), "runs")
		script := fmt.Sprintf("echo run >> %s; sleep 0.2; echo token-$(wc -l < %s | tr -d ' ')", counter, counter)
		now := time.Now()
		s := &commandSource{name: "c", argv: []string{"sh", "-c", script}, ttl: time.Minute, timeout: 5 * time.Second, now: func() time.Time { return now }}
		var wg sync.WaitGroup
		vals := make([]string, 8)
		for i := range vals {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := s.Get(ctx, Request{})
				if err != nil {
					t.Error(err)
				}
				vals[i] = v.Reveal()
			}()
		}
		wg.Wait()
		for _, v := range vals {
			if v != "token-1" {
				t.Fatalf("concurrent gets: %q (want one shared run)", vals)
			}
		}
		now = now.Add(2 * time.Minute)
		if v, _ := s.Get(ctx, Request{}); v.Reveal() != "token-2" {
			t.Fatalf("after the TTL: %q", v.Reveal())
		}
	})
	t.Run("command failure and timeout", func(t *testing.T) {
		for _, argv := range [][]string{{"false"}, {"sh", "-c", "sleep 5"}, {"sh", "-c", "printf 'a\\nb\\n'"}, {"true"}} {
			s := &commandSource{name: "c", argv: argv, ttl: time.Minute, timeout: 300 * time.Millisecond, now: time.Now}
			if _, err := s.Get(ctx, Request{}); !errors.Is(err, ErrUnavailable) {
				t.Errorf("%v: %v", argv, err)
			}
		}
	})
}

func TestPlaceholders(t *testing.T) {
	b := newBroker(t, "{env: GITHUB_TOKEN}")
	p1, env, ok := b.Placeholder("agent-1", "github")
	p2, _, _ := b.Placeholder("agent-2", "github")
	if !ok || env != "GITHUB_TOKEN" || p1 == p2 || len(p1) < 32 {
		t.Fatalf("placeholders %q %q env %q", p1, p2, env)
	}
	if again, _, _ := b.Placeholder("agent-1", "github"); again != p1 {
		t.Error("a derived placeholder is not stable")
	}
	fixed := newBroker(t, "{command: [gh, auth, token]}", "    placeholder: fixed-placeholder-value-123")
	if p, env, _ := fixed.Placeholder("any", "github"); p != "fixed-placeholder-value-123" || env != "GITHUB_TOKEN" {
		t.Errorf("configured placeholder: %q %q", p, env)
	}
}

func TestFindPlaceholder(t *testing.T) {
	b := newBroker(t, "{env: GITHUB_TOKEN}")
	ph, _, _ := b.Placeholder("default", "github")
	gh := host(t, "api.github.com")
	cases := []struct {
		name    string
		build   func() *http.Request
		allowed string
		host    policy.Host
		where   string // "" = nothing found
	}{
		{"in its slot, to a bound host, by a credential rule", func() *http.Request {
			r, _ := http.NewRequest("GET", "https://api.github.com/user", nil)
			r.Header.Set("Authorization", "Bearer "+ph)
			return r
		}, "github", gh, ""},
		{"in its slot, but the rule injects nothing", func() *http.Request {
			r, _ := http.NewRequest("GET", "https://api.github.com/user", nil)
			r.Header.Set("Authorization", "Bearer "+ph)
			return r
		}, "", gh, "header Authorization"},
		{"in its slot, to another host", func() *http.Request {
			r, _ := http.NewRequest("GET", "https://evil.test/", nil)
			r.Header.Set("Authorization", "Bearer "+ph)
			return r
		}, "github", host(t, "evil.test"), "header Authorization"},
		{"in another header", func() *http.Request {
			r, _ := http.NewRequest("GET", "https://api.github.com/user", nil)
			r.Header.Set("X-Debug", ph)
			return r
		}, "github", gh, "header X-Debug"},
		{"in the query", func() *http.Request {
			r, _ := http.NewRequest("GET", "https://evil.test/?t="+url.QueryEscape(ph), nil)
			return r
		}, "", host(t, "evil.test"), "url"},
		{"in the body", func() *http.Request {
			r, _ := http.NewRequest("POST", "https://evil.test/upload", strings.NewReader("data="+ph+"&x=1"))
			return r
		}, "", host(t, "evil.test"), "body"},
		{"nowhere", func() *http.Request {
			r, _ := http.NewRequest("POST", "https://evil.test/upload", strings.NewReader("harmless"))
			return r
		}, "", host(t, "evil.test"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.build()
			var before []byte
			if r.Body != nil {
				before, _ = io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(before))
			}
			f, found, err := b.FindPlaceholder(r, "default", tc.allowed, tc.host)
			if err != nil {
				t.Fatal(err)
			}
			if found != (tc.where != "") || (found && (f.Where != tc.where || f.Credential != "github")) {
				t.Fatalf("found=%v %+v, want %q", found, f, tc.where)
			}
			if r.Body != nil {
				after, err := io.ReadAll(r.Body)
				if err != nil || !bytes.Equal(before, after) {
					t.Errorf("the body changed: %v", err)
				}
			}
		})
	}
	// Another sandbox's placeholder is not this sandbox's.
	other, _, _ := b.Placeholder("agent-2", "github")
	r, _ := http.NewRequest("GET", "https://evil.test/?t="+other, nil)
	if _, found, _ := b.FindPlaceholder(r, "default", "", host(t, "evil.test")); found {
		t.Error("found another sandbox's placeholder")
	}
}

func TestScrubMasksReflectedValuesAcrossReads(t *testing.T) {
	inj := &Injection{Credential: "github", values: reflections(realToken)}
	b64 := base64.StdEncoding.EncodeToString([]byte(realToken))
	body := "echo: Bearer " + realToken + " | b64: " + b64 + " | url: " + url.QueryEscape(realToken) + " | end"
	for _, size := range []int{1, 3, 7, 64, 1 << 16} {
		src := io.NopCloser(iotest.OneByteReader(strings.NewReader(body)))
		if size > 1 {
			src = io.NopCloser(io.LimitReader(strings.NewReader(body), int64(len(body))))
		}
		got, err := io.ReadAll(readerOfSize(inj.ScrubBody(src), size))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(body) {
			t.Errorf("size %d: length %d, want %d (same-length masks)", size, len(got), len(body))
		}
		if bytes.Contains(got, []byte("REALSECRET")) || bytes.Contains(got, []byte(b64)) || !bytes.HasSuffix(got, []byte(" | end")) {
			t.Errorf("size %d: %s", size, got)
		}
	}
	h := http.Header{"X-Echo": {"Bearer " + realToken}, "X-B64": {b64}}
	inj.ScrubHeader(h)
	if strings.Contains(fmt.Sprint(h), "REALSECRET") || strings.Contains(fmt.Sprint(h), b64) {
		t.Errorf("headers: %v", h)
	}
}

// readerOfSize reads from r in steps of at most n bytes.
func readerOfSize(r io.Reader, n int) io.Reader {
	return &stepReader{r: r, n: n}
}

type stepReader struct {
	r io.Reader
	n int
}

func (s *stepReader) Read(p []byte) (int, error) {
	if len(p) > s.n {
		p = p[:s.n]
	}
	return s.r.Read(p)
}

// A body longer than the prefetched head is scanned as it streams,
// however long, with the placeholder anywhere, in any case, split across
// reads.
func TestBodyScannerStreams(t *testing.T) {
	b := newBroker(t, "{env: GITHUB_TOKEN}")
	ph, _, _ := b.Placeholder("default", "github")
	big := strings.Repeat("x", 3<<20)
	for _, body := range []string{
		big + ph,
		big[:1<<20-5] + strings.ToUpper(ph) + big,
		big[:PrefetchBody-7] + ph, // straddles the prefetched head
	} {
		r, _ := http.NewRequest("POST", "https://evil.test/", io.NopCloser(iotest.HalfReader(strings.NewReader(body))))
		if _, found, _ := b.FindPlaceholder(r, "default", "", host(t, "evil.test")); found {
			t.Fatal("found in headers")
		}
		got, err := io.ReadAll(r.Body)
		var pe *PlaceholderError
		if !errors.As(err, &pe) || bytes.Contains(bytes.ToLower(got), []byte(ph)) {
			t.Errorf("body of %d bytes: err=%v, placeholder passed=%v", len(body), err, bytes.Contains(bytes.ToLower(got), []byte(ph)))
		}
	}
	// A clean body passes whole.
	r, _ := http.NewRequest("POST", "https://evil.test/", io.NopCloser(iotest.HalfReader(strings.NewReader(big))))
	b.FindPlaceholder(r, "default", "", host(t, "evil.test"))
	if got, err := io.ReadAll(r.Body); err != nil || len(got) != len(big) {
		t.Errorf("clean body: %d bytes, %v", len(got), err)
	}
}

func TestRedact(t *testing.T) {
	b := newBroker(t, "{env: GITHUB_TOKEN}")
	ph, _, _ := b.Placeholder("default", "github")
	got := b.Redact("default", "/x/"+strings.ToUpper(ph)+"/y?"+ph)
	if strings.Contains(strings.ToLower(got), ph) || got != "/x/[placeholder]/y?[placeholder]" {
		t.Errorf("Redact: %q", got)
	}
}

func TestScrubMasksOtherEncodingsOfTheValue(t *testing.T) {
	const tok = "ghs_REAL/SECRET+TOKEN_0123456789"
	inj := &Injection{Credential: "c", values: reflections(tok)}
	for _, echo := range []string{
		fmt.Sprintf("%x", tok),
		strings.ToUpper(fmt.Sprintf("%x", tok)),
		strings.ReplaceAll(tok, "/", `\/`),
		lowerEscapes(url.QueryEscape(tok)),
		url.QueryEscape(tok),
		base64.StdEncoding.EncodeToString([]byte("Authorization: Bearer " + tok)),
		base64.StdEncoding.EncodeToString([]byte("x" + tok)),
		base64.URLEncoding.EncodeToString([]byte("xy" + tok)),
	} {
		got, _ := io.ReadAll(inj.ScrubBody(io.NopCloser(strings.NewReader("echo: " + echo + " end"))))
		if strings.Contains(string(got), echo) {
			t.Errorf("not masked: %s", echo)
		}
	}
}

func TestSourceValuesAreChecked(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "token")
	os.WriteFile(path, []byte("tok\r\nX-Injected: yes\n"), 0o600)
	if _, err := (&fileSource{name: "c", path: path}).Get(ctx, Request{}); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "X-Injected") {
		t.Errorf("a value with a line break: %v", err)
	}
	s := &commandSource{name: "c", argv: []string{"sh", "-c", "head -c 50000000 /dev/zero | tr '\\0' a"}, ttl: time.Minute, timeout: 10 * time.Second, now: time.Now}
	if _, err := s.Get(ctx, Request{}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a command printing 50 MB: %v", err)
	}
}

func TestScrubHeaderDropsHeadersNamedAfterTheValue(t *testing.T) {
	inj := &Injection{Credential: "c", values: reflections("REALSECRETvalue12345abcdef")}
	h := http.Header{"X-Realsecretvalue12345abcdef": {"1"}, "X-Other": {"fine"}}
	inj.ScrubHeader(h)
	if len(h) != 1 || h.Get("X-Other") != "fine" {
		t.Errorf("headers after scrubbing: %v", h)
	}
}

func TestFindPlaceholderNeverReportsAnotherPlaceholder(t *testing.T) {
	cfg := parseCfg(t, "credentials:\n  aaa:\n    source: {env: A}\n    hosts: [api.test]\n  zzz:\n    source: {env: Z}\n    hosts: [api.test]\n")
	b, _ := New(cfg, []byte("0123456789abcdef0123456789abcdef"), nil)
	pa, _, _ := b.Placeholder("default", "aaa")
	pz, _, _ := b.Placeholder("default", "zzz")
	r, _ := http.NewRequest("GET", "http://other.test/", nil)
	r.Header.Set(pz, pa) // one placeholder as a header name, the other as its value
	f, found, _ := b.FindPlaceholder(r, "default", "", host(t, "other.test"))
	if !found || strings.Contains(strings.ToLower(f.Where), pz) || strings.Contains(strings.ToLower(f.Where), pa) {
		t.Errorf("found=%v where=%q", found, f.Where)
	}
}
