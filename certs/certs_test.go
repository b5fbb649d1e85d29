package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func initCA(t testing.TB) *CA {
	t.Helper()
	certPath, keyPath, created, err := Init(t.TempDir())
	if err != nil || !created {
		t.Fatalf("Init: created=%v err=%v", created, err)
	}
	ca, err := Load(certPath, keyPath, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestInitCreatesACAOnceWithAPrivateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	certPath, keyPath, created, err := Init(dir)
	if err != nil || !created {
		t.Fatalf("first Init: created=%v err=%v", created, err)
	}
	st, err := os.Stat(keyPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode: %v %v", st.Mode(), err)
	}
	before, _ := os.ReadFile(certPath)
	_, _, created, err = Init(dir)
	if err != nil || created {
		t.Fatalf("second Init must keep the CA: created=%v err=%v", created, err)
	}
	after, _ := os.ReadFile(certPath)
	if string(before) != string(after) {
		t.Fatal("second Init replaced the CA")
	}
	ca, err := Load(certPath, keyPath, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Certificate()
	if !c.IsCA || c.PublicKeyAlgorithm != x509.ECDSA || c.NotAfter.Sub(c.NotBefore) < CAValidity {
		t.Errorf("CA: IsCA=%v alg=%v validity=%v", c.IsCA, c.PublicKeyAlgorithm, c.NotAfter.Sub(c.NotBefore))
	}
}

func TestInitRefusesAHalfState(t *testing.T) {
	dir := t.TempDir()
	_, keyPath, _, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(keyPath)
	if _, _, _, err := Init(dir); err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Fatalf("Init with the key missing: %v", err)
	}
}

func TestLoadRejectsMismatchedOrNonCA(t *testing.T) {
	dir1, dir2 := t.TempDir(), t.TempDir()
	cert1, _, _, _ := Init(dir1)
	_, key2, _, _ := Init(dir2)
	if _, err := Load(cert1, key2, 0); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Errorf("mismatched key: %v", err)
	}
	// A leaf certificate is not a CA.
	ca := initCA(t)
	leaf, _ := ca.Leaf("a.example")
	leafPEM := filepath.Join(t.TempDir(), "leaf.pem")
	os.WriteFile(leafPEM, pemCert(leaf.Leaf), 0o600)
	key1 := filepath.Join(dir1, KeyFile)
	if _, err := Load(leafPEM, key1, 0); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Errorf("leaf as CA: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.pem"), key1, 0); err == nil {
		t.Error("missing file loaded")
	}
}

func TestLeafVerifiesForItsHostOnly(t *testing.T) {
	ca := initCA(t)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	for _, host := range []string{"api.github.com", "xn--jv8h.allowed.test", "10.1.2.3", "2001:db8::1"} {
		c, err := ca.Leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "evil.example", Roots: roots}); err == nil {
			t.Errorf("%s leaf verifies for evil.example", host)
		}
		if len(c.Certificate) != 2 {
			t.Errorf("%s: chain has %d certificates, want leaf and CA", host, len(c.Certificate))
		}
	}
}

func TestLeafNeverOutlivesTheCA(t *testing.T) {
	ca := initCA(t)
	ca.now = func() time.Time { return ca.cert.NotAfter.Add(-2 * time.Hour) }
	c, err := ca.Leaf("late.example")
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf.NotAfter.After(ca.cert.NotAfter) {
		t.Errorf("leaf valid until %v, CA until %v", c.Leaf.NotAfter, ca.cert.NotAfter)
	}
	ca.now = func() time.Time { return ca.cert.NotAfter.Add(time.Minute) }
	if _, err := ca.Leaf("after.example"); err == nil {
		t.Error("minted a leaf after the CA expired")
	}
}

func TestLeafIsCachedAndSharedAcrossConcurrentRequests(t *testing.T) {
	ca := initCA(t)
	var wg sync.WaitGroup
	got := make([]*tls.Certificate, 16)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = ca.Leaf("same.example") }()
	}
	wg.Wait()
	for _, c := range got[1:] {
		if c != got[0] {
			t.Fatal("concurrent requests minted different leaves")
		}
	}
	// Near expiry the leaf is minted again.
	ca.now = func() time.Time { return got[0].Leaf.NotAfter.Add(-time.Minute) }
	if again, _ := ca.Leaf("same.example"); again == got[0] {
		t.Error("a leaf about to expire was served from the cache")
	}
}

func TestLeafCacheIsBounded(t *testing.T) {
	certPath, keyPath, _, _ := Init(t.TempDir())
	ca, err := Load(certPath, keyPath, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"a.test", "b.test", "c.test", "d.test", "e.test", "f.test"} {
		ca.Leaf(h)
	}
	if n := ca.cache.Len(); n != 4 {
		t.Errorf("cache holds %d leaves, want 4", n)
	}
}

func BenchmarkLeafMint(b *testing.B) {
	ca := initCA(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := ca.mint("host.example"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeafCached(b *testing.B) {
	ca := initCA(b)
	ca.Leaf("host.example")
	b.ReportAllocs()
	for b.Loop() {
		ca.Leaf("host.example")
	}
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
