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
// credential (raw, hex, base64, percent-encoded) with asterisks of the
// same length, and removes headers whose name holds one (any case). A
// nil Injection does nothing.
func (inj *Injection) ScrubHeader(h http.Header) {
	if inj == nil {
		return
	}
	for k, vs := range h {
		lk := strings.ToLower(k)
		for _, sec := range inj.values {
			if f := strings.ToLower(sec.Reveal()); strings.Contains(lk, f) {
				delete(h, k) // a header name cannot be masked in place
				break
			}
		}
		if _, ok := h[k]; !ok {
			continue
		}
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
	// Masking a complete form: one cut off at the end of the window is
	// completed by the next read and masked then, since the held-back tail
	// is shorter than any form.
	return &holdback{src: body, keep: len(forms[0]) - 1, inspect: func(buf []byte, from int) error { // longest first
		for _, f := range forms {
			for i := bytes.Index(buf[from:], f); i >= 0; i = bytes.Index(buf[from:], f) {
				copy(buf[from+i:], mask(len(f)))
			}
		}
		return nil
	}}
}
