// Package certs holds Airlock's certificate authority for TLS
// interception: it loads or generates the CA, and mints leaf certificates
// for intercepted hosts on demand.
//
// The CA is ECDSA P-256. Leaves share one ECDSA P-256 key generated when
// the CA is loaded (a leaf key protects nothing the CA key does not), are
// valid for at most LeafValidity and never beyond the CA, and are kept in
// a bounded LRU cache; concurrent requests for one host share one mint.
// The package never writes a key anywhere but the state directory it is
// given, with mode 0600, and never logs key material.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// File names in a state directory.
const (
	CertFile = "ca.pem"     // the CA certificate: give it to the sandbox's trust store
	KeyFile  = "ca-key.pem" // the CA private key (PKCS #8): never give it to the sandbox
)

// Validity periods.
const (
	CAValidity   = 3 * 365 * 24 * time.Hour // of a generated CA
	LeafValidity = 24 * time.Hour           // of a minted leaf, capped by the CA's NotAfter
	leafBackdate = time.Hour                // NotBefore lies this far in the past, for clock skew
	leafRenew    = time.Hour                // a cached leaf this close to expiry is minted again
)

// DefaultCacheSize is how many leaf certificates a CA keeps when
// Load is given 0.
const DefaultCacheSize = 1024

// CA signs leaf certificates for intercepted hosts. It is safe for
// concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	leafKey *ecdsa.PrivateKey
	cache   *lru.Cache[string, *tls.Certificate]
	mints   singleflight.Group
	now     func() time.Time
}

// Generate creates a new self-signed ECDSA P-256 CA valid for CAValidity
// and returns the certificate and PKCS #8 private key as PEM.
func Generate() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Airlock"}, CommonName: "Airlock interception CA " + host},
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// Init makes sure dir holds a CA: it generates one (CertFile, KeyFile)
// when neither file exists, and otherwise leaves what is there alone. It
// reports the two paths and whether it created them. dir is created with
// mode 0700 if missing; the key is written with mode 0600.
func Init(dir string) (certPath, keyPath string, created bool, err error) {
	certPath, keyPath = filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		return certPath, keyPath, false, nil
	case certErr == nil || keyErr == nil:
		return "", "", false, fmt.Errorf("state directory %s holds only one of %s and %s; restore the other or remove both to generate a new CA", dir, CertFile, KeyFile)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", false, fmt.Errorf("create state directory: %w", err)
	}
	certPEM, keyPEM, err := Generate()
	if err != nil {
		return "", "", false, fmt.Errorf("generate CA: %w", err)
	}
	// The key first, exclusively: two processes initialising one directory
	// must not end up with a certificate for the other's key.
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return "", "", false, err
	}
	if err := writeNew(certPath, certPEM, 0o644); err != nil {
		os.Remove(keyPath)
		return "", "", false, err
	}
	return certPath, keyPath, true, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// Load reads a CA certificate and key (PEM; the key PKCS #8, SEC 1 "EC
// PRIVATE KEY" or PKCS #1) and checks that the certificate is a CA that
// may sign certificates, is valid now, and matches the key. cacheSize
// bounds the leaf cache; 0 means DefaultCacheSize. Errors name the file
// and what is wrong with it.
func Load(certPath, keyPath string, cacheSize int) (*CA, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	return parse(certPath, certPEM, keyPath, keyPEM, cacheSize)
}

func parse(certPath string, certPEM []byte, keyPath string, keyPEM []byte, cacheSize int) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM CERTIFICATE block", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%s: not a CA certificate (needs basic constraints CA:TRUE and key usage certSign)", certPath)
	}
	now := time.Now()
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return nil, fmt.Errorf("%s: the CA is valid from %s to %s, not now; generate a new one (airlock ca init)", certPath,
			cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339))
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("%s does not belong to the certificate %s", keyPath, certPath)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if cacheSize <= 0 {
		cacheSize = DefaultCacheSize
	}
	cache, err := lru.New[string, *tls.Certificate](cacheSize)
	if err != nil {
		return nil, err
	}
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:     key,
		leafKey: leafKey,
		cache:   cache,
		now:     time.Now,
	}, nil
}

func parseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM private key block")
	}
	var k any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unsupported private key type %T", k)
	}
	return s, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}

// CertPEM returns the CA certificate as PEM, for the sandbox's trust store.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Certificate returns the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns a certificate for host (a canonical DNS name, or an IP
// address in its canonical text form), minting it on first use. The
// certificate names host alone (as a DNS name or IP SAN), is valid from an
// hour ago for LeafValidity but never past the CA's NotAfter, and is
// cached; a cached leaf within an hour of expiry is minted again.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	if c, ok := ca.cache.Get(host); ok && ca.now().Add(leafRenew).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	v, err, _ := ca.mints.Do(host, func() (any, error) {
		c, err := ca.mint(host)
		if err != nil {
			return nil, err
		}
		ca.cache.Add(host, c)
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

// Fetch implements goproxy's CertStorage: it ignores gen (goproxy's own
// signer) and returns Leaf(hostname).
func (ca *CA) Fetch(hostname string, _ func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	return ca.Leaf(hostname)
}

func (ca *CA) mint(host string) (*tls.Certificate, error) {
	if host == "" {
		return nil, errors.New("certs: empty host")
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := ca.now()
	notAfter := now.Add(LeafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("certs: the CA expired at %s; generate a new one", ca.cert.NotAfter.Format(time.RFC3339))
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-leafBackdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("certs: mint leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: ca.leafKey, Leaf: leaf}, nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
