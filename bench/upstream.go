package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockhq/airlock/certs"
)

// The upstream runs in a process of its own (bench -upstream DIR), so that
// its sockets and CPU are not the load generator's: it serves HTTP and
// HTTPS on 127.0.0.1 and DNS on UDP, and counts the connections it
// accepts (GET /stats), which shows how many upstream connections a proxy
// opens per request.
//
//	/1k         1024 bytes
//	/stream?n=N N bytes, written 256 KiB at a time
//	/stats      "CONNS" : connections accepted so far (HTTP and HTTPS)
func serveUpstream(dir string) error {
	// A throwaway CA of Airlock's own kind (package certs), and a leaf
	// for 127.0.0.1 from it; clients and Airlock trust upstream-ca.pem.
	certPath, keyPath, _, err := certs.Init(filepath.Join(dir, "upstream-ca"))
	if err != nil {
		return err
	}
	ca, err := certs.Load(certPath, keyPath, 0)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "upstream-ca.pem"), ca.CertPEM(), 0o644); err != nil {
		return err
	}
	leaf, err := ca.Leaf("127.0.0.1")
	if err != nil {
		return err
	}
	cert := *leaf
	var conns atomic.Int64
	block := make([]byte, 256<<10)
	for i := range block {
		block[i] = 'x'
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/1k", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1024")
		w.Write(block[:1024])
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k := min(n, int64(len(block)))
			if _, err := w.Write(block[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, conns.Load())
	})
	count := func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ConnState: count, ReadHeaderTimeout: time.Minute}
	ts := &http.Server{Handler: mux, ConnState: count, ReadHeaderTimeout: time.Minute,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}}
	ds := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(127, 0, 0, 1)})
		}
		w.WriteMsg(m)
	})}
	go hs.Serve(hl)
	go ts.ServeTLS(tl, "", "")
	go ds.ActivateAndServe()
	fmt.Printf("%d %d %d\n", hl.Addr().(*net.TCPAddr).Port, tl.Addr().(*net.TCPAddr).Port, pc.LocalAddr().(*net.UDPAddr).Port)
	select {}
}
