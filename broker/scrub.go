package broker

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// mask replaces a reflected value: the same length, so Content-Length
// stays true, and nothing of the value.
func mask(n int) string { return strings.Repeat("*", n) }

// ScrubHeader replaces, in every value of h, each form of the injected
// credential (raw, base64, percent-encoded) with asterisks of the same
// length. A nil Injection does nothing.
func (inj *Injection) ScrubHeader(h http.Header) {
	if inj == nil {
		return
	}
	for k, vs := range h {
		for i, v := range vs {
			for _, sec := range inj.values {
				if f := sec.Reveal(); strings.Contains(v, f) {
					v = strings.ReplaceAll(v, f, mask(len(f)))
				}
			}
			h[k][i] = v
		}
	}
}

// ScrubBody wraps a response body so that each form of the injected
// credential is replaced by asterisks of the same length as it streams
// through. It holds back at most the longest form minus one byte (a value
// may straddle two reads) and never buffers the whole body. A nil
// Injection returns body unchanged.
func (inj *Injection) ScrubBody(body io.ReadCloser) io.ReadCloser {
	if inj == nil || body == nil || body == http.NoBody || len(inj.values) == 0 {
		return body
	}
	forms := make([][]byte, len(inj.values))
	for i, sec := range inj.values {
		forms[i] = []byte(sec.Reveal())
	}
	return &scrubber{src: body, forms: forms, keep: len(forms[0]) - 1} // longest first
}

type scrubber struct {
	src   io.ReadCloser
	forms [][]byte
	keep  int    // bytes held back at the end of buf until more arrive
	buf   []byte // scrubbed except for the last keep bytes
	out   []byte // ready to hand out
	chunk []byte
	eof   bool
	err   error
}

func (s *scrubber) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			return 0, s.err
		}
		if s.chunk == nil {
			s.chunk = make([]byte, 32<<10)
		}
		n, err := s.src.Read(s.chunk)
		s.buf = append(s.buf, s.chunk[:n]...)
		if err != nil {
			s.eof, s.err = true, err
		}
		s.scrub()
		cut := len(s.buf) - s.keep
		if s.eof {
			cut = len(s.buf)
		}
		if cut > 0 {
			s.out = append(s.out, s.buf[:cut]...)
			s.buf = append(s.buf[:0], s.buf[cut:]...)
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// scrub masks every complete form in buf. A form cut off at the end of
// buf is completed by the next read and masked then: the held-back tail
// is always shorter than any form, so it cannot hold a whole one unseen.
func (s *scrubber) scrub() {
	for _, f := range s.forms {
		for i := bytes.Index(s.buf, f); i >= 0; i = bytes.Index(s.buf, f) {
			copy(s.buf[i:], mask(len(f)))
		}
	}
}

func (s *scrubber) Close() error { return s.src.Close() }
