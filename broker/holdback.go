package broker

import (
	"errors"
	"io"
)

// holdback streams src through a sliding window so that a pattern of up
// to keep+1 bytes is seen whole before any byte of it is handed on. Each
// time bytes arrive, inspect runs over the bytes not yet handed out (from
// is where a match completed by the new bytes can start); it may rewrite
// buf in place (same length), or return an error, which ends the stream
// with nothing more handed out. All but the last keep bytes are then
// handed out; at the end of src, all of them. Response scrubbing and
// request-body scanning share it.
type holdback struct {
	src     io.ReadCloser
	keep    int
	inspect func(buf []byte, from int) error
	buf     []byte // inspected bytes not yet handed out
	chunk   []byte
	err     error // from src (io.EOF included) or inspect
}

func (h *holdback) Read(p []byte) (int, error) {
	for {
		if h.err != nil && !errors.Is(h.err, io.EOF) {
			return 0, h.err
		}
		ready := len(h.buf) - h.keep
		if h.err != nil { // end of src: everything left has been inspected
			ready = len(h.buf)
		}
		if ready > 0 {
			n := copy(p, h.buf[:ready])
			h.buf = h.buf[n:]
			return n, nil
		}
		if h.err != nil {
			return 0, h.err
		}
		if h.chunk == nil {
			h.chunk = make([]byte, 32<<10)
		}
		n, err := h.src.Read(h.chunk)
		h.buf = append(h.buf, h.chunk[:n]...)
		if err != nil {
			h.err = err
		}
		if ierr := h.inspect(h.buf, max(0, len(h.buf)-n-h.keep)); ierr != nil {
			h.buf, h.err = nil, ierr
			return 0, ierr
		}
	}
}

func (h *holdback) Close() error { return h.src.Close() }
