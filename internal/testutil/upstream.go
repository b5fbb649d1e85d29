// Package testutil holds test helpers shared by Airlock's packages: local
// upstream servers (HTTP and HTTPS with a throwaway CA), a DNS stub that
// records the names it is asked for, and a runner for the real airlock
// binary. Everything listens on loopback only.
package testutil

import (
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Upstream is a local origin server. Its handler answers:
//
//	/            "hello from upstream\n"
//	/headers     the request's Host and headers as JSON (see Seen)
//	/redirect    302 to the URL in the "to" query parameter
//	/bytes?n=N   N bytes of 'x'
//	/echo        the request body
//	/gzip-headers the request headers as JSON, gzipped whatever was asked
//	/trailer     a body, then the Authorization header in trailer X-Echo
//
// Every request is recorded; Requests returns them.
type Upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []Seen
}

// Seen is what an Upstream saw of one request.
type Seen struct {
	Method string
	Host   string
	Path   string
	Header http.Header
}

// Port returns the port the upstream listens on.
func (u *Upstream) Port() int {
	_, p, _ := net.SplitHostPort(u.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return n
}

// Requests returns every request seen so far.
func (u *Upstream) Requests() []Seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Seen(nil), u.reqs...)
}

func (u *Upstream) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from upstream\n")
	})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"host": r.Host, "header": r.Header})
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k := min(n, len(xs))
			if _, err := w.Write(xs[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/gzip-headers", func(w http.ResponseWriter, r *http.Request) {
		// A hostile echo: gzip whatever the client accepts.
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		json.NewEncoder(zw).Encode(r.Header)
		zw.Close()
	})
	mux.HandleFunc("/trailer", func(w http.ResponseWriter, r *http.Request) {
		// Echo the Authorization header in a trailer, after the body.
		w.Header().Set("Trailer", "X-Echo")
		io.WriteString(w, "body first\n")
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 32<<10)
		for {
			n, err := r.Body.Read(b)
			w.Write(b[:n])
			if err != nil {
				return
			}
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.reqs = append(u.reqs, Seen{Method: r.Method, Host: r.Host, Path: r.URL.Path, Header: r.Header.Clone()})
		u.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

// xs is the body source of /bytes, shared so the upstream does not
// allocate per request (benchmarks count allocations in-process).
var xs = []byte(strings.Repeat("x", 32<<10))

// NewUpstream starts a plain-HTTP upstream on 127.0.0.1.
func NewUpstream(t testing.TB) *Upstream {
	t.Helper()
	u := &Upstream{}
	u.Server = httptest.NewServer(u.handler())
	t.Cleanup(u.Close)
	return u
}

// NewTLSUpstream starts an HTTPS upstream on 127.0.0.1 whose certificate,
// issued by ca, is valid for names.
func NewTLSUpstream(t testing.TB, ca *CA, names ...string) *Upstream {
	t.Helper()
	u := &Upstream{}
	u.Server = httptest.NewUnstartedServer(u.handler())
	u.TLS = ca.tlsConfig(t, names...)
	u.StartTLS()
	t.Cleanup(u.Close)
	return u
}

// CA is a throwaway certificate authority for test upstreams.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// NewCA generates a CA valid for one day.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "airlock test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf issues a server certificate for names (DNS names or IP addresses).
func (ca *CA) Leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsConfig is a server configuration with a leaf for names.
func (ca *CA) tlsConfig(t testing.TB, names ...string) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, names...)}}
}

// Pool returns a cert pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// WritePEM writes the CA certificate to dir/ca.pem and returns the path.
func (ca *CA) WritePEM(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
