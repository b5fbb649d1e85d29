package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"time"

	"github.com/airlockhq/airlock/policy"
)

// Reasons for refusing an opaque tunnel after its ClientHello.
const (
	reasonTLSRequired = "tls_required" // the tunnel did not start with a TLS ClientHello
)

// maxClientHello bounds the bytes read to find a ClientHello: a few
// records, more than any real hello (post-quantum ones are ~2 KB).
const maxClientHello = 64 << 10

// extensionECH is the encrypted_client_hello extension (RFC 9849 §5,
// IANA TLS ExtensionType 0xfe0d): the outer SNI is then a cover name and
// the server routes on an inner one Airlock cannot see.
const extensionECH = 0xfe0d

// errHelloSeen stops the handshake once the ClientHello is parsed.
var errHelloSeen = errors.New("client hello read")

// readClientHello reads from r until crypto/tls has parsed a complete
// ClientHello, and returns its server name (SNI), its extension IDs, and
// every byte read (to replay to the upstream). It fails if the bytes are
// not a TLS ClientHello.
func readClientHello(r io.Reader) (sni string, exts []uint16, raw []byte, err error) {
	var rec bytes.Buffer
	conn := &helloConn{r: io.TeeReader(io.LimitReader(r, maxClientHello), &rec)}
	var seen bool
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		seen, sni, exts = true, h.ServerName, slices.Clone(h.Extensions)
		return nil, errHelloSeen
	}}
	herr := tls.Server(conn, cfg).Handshake()
	if !seen {
		return "", nil, rec.Bytes(), errors.Join(errors.New("not a TLS ClientHello"), herr)
	}
	return sni, exts, rec.Bytes(), nil
}

// checkClientHello says why a tunnel's ClientHello must not go to host,
// or "" if it may. An opaque tunnel is decided on the CONNECT host, but
// CDNs route on the TLS server name: a ClientHello naming another site
// would reach any tenant of the CDN that serves the allowed host.
func checkClientHello(sni string, exts []uint16, host policy.Host) string {
	if slices.Contains(exts, extensionECH) {
		return "the TLS ClientHello uses Encrypted Client Hello, which hides the server it is for"
	}
	return sniMismatch(sni, host)
}

// helloConn feeds crypto/tls the client's bytes and swallows its replies.
type helloConn struct{ r io.Reader }

func (c *helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }
