package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/airlockhq/airlock/policy"
)

// ErrUnavailable is wrapped by every error a Source returns: the value
// could not be had, so the request must not be forwarded
// (credential_unavailable).
var ErrUnavailable = errors.New("credential unavailable")

// Source produces a credential's current value.
type Source interface {
	// Get returns the value for a request from sandbox to host, or an
	// error wrapping ErrUnavailable that says why (never containing the
	// value). Fixed sources ignore req; minters use it (a JWT's sub and
	// aud) and cache per request kind.
	Get(ctx context.Context, req Request) (Secret, error)
}

// Request is who a credential is for.
type Request struct {
	Sandbox string
	Host    string // canonical host of the request it is injected into
}

// newSource builds the Source a configuration names. client carries the
// minters' own requests (token endpoints), through Airlock's guarded
// dialer.
func newSource(name string, spec policy.SourceSpec, client *http.Client) (Source, error) {
	if spec.JWT != nil || spec.OAuth2 != nil || spec.GitHubApp != nil {
		m, err := newMinter(name, spec, client)
		if err != nil {
			return nil, err
		}
		return newCachedMinter(name, m), nil
	}
	switch {
	case spec.Env != "":
		return envSource{name: name, env: spec.Env}, nil
	case spec.File != "":
		return &fileSource{name: name, path: spec.File}, nil
	case len(spec.Command) > 0:
		return &commandSource{name: name, argv: spec.Command, ttl: spec.TTL, timeout: spec.Timeout, now: time.Now}, nil
	}
	return nil, fmt.Errorf("credential %s: no source", name)
}

// envSource reads an environment variable of Airlock's process on every
// Get, so a changed environment (in tests, or a re-exec) is seen.
type envSource struct{ name, env string }

func (s envSource) Get(context.Context, Request) (Secret, error) {
	v := strings.TrimSpace(os.Getenv(s.env))
	if err := checkValue(v); err != nil {
		return Secret{}, fmt.Errorf("%w: credential %s: environment variable %s: %v", ErrUnavailable, s.name, s.env, err)
	}
	return NewSecret(v), nil
}

// fileSource reads a file, again whenever its size or modification time
// changes (a rotated token is picked up without a restart). One trailing
// newline (and surrounding spaces) is dropped.
type fileSource struct {
	name, path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	value   Secret
}

func (s *fileSource) Get(context.Context, Request) (Secret, error) {
	st, err := os.Stat(s.path)
	if err != nil {
		return Secret{}, fmt.Errorf("%w: credential %s: %v", ErrUnavailable, s.name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.value.IsZero() && st.ModTime().Equal(s.modTime) && st.Size() == s.size {
		return s.value, nil
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return Secret{}, fmt.Errorf("%w: credential %s: %v", ErrUnavailable, s.name, err)
	}
	v := strings.TrimSpace(string(data))
	if err := checkValue(v); err != nil {
		return Secret{}, fmt.Errorf("%w: credential %s: %s: %v", ErrUnavailable, s.name, s.path, err)
	}
	s.value, s.modTime, s.size = NewSecret(v), st.ModTime(), st.Size()
	return s.value, nil
}

// commandSource runs a command and uses what it prints (trimmed) for ttl.
// Concurrent Gets share one run; a failed run is not cached.
type commandSource struct {
	name    string
	argv    []string
	ttl     time.Duration
	timeout time.Duration
	now     func() time.Time

	runs    singleflight.Group
	mu      sync.Mutex
	value   Secret
	expires time.Time
}

func (s *commandSource) Get(ctx context.Context, _ Request) (Secret, error) {
	s.mu.Lock()
	if !s.value.IsZero() && s.now().Before(s.expires) {
		v := s.value
		s.mu.Unlock()
		return v, nil
	}
	s.mu.Unlock()
	v, err, _ := s.runs.Do("run", func() (any, error) {
		// Not the request's context: one client giving up must not fail
		// the run the others wait for.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		cmd := exec.CommandContext(rctx, s.argv[0], s.argv[1:]...)
		var stdout, stderr limitedBuffer
		stdout.max, stderr.max = MaxValueLen+1, 4096
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = time.Second
		if err := cmd.Run(); err != nil {
			if rctx.Err() != nil {
				return nil, fmt.Errorf("%w: credential %s: command %s timed out after %s", ErrUnavailable, s.name, s.argv[0], s.timeout)
			}
			// stderr may explain (not logged by us: it could echo input);
			// name only the command and its exit.
			return nil, fmt.Errorf("%w: credential %s: command %s: %v", ErrUnavailable, s.name, s.argv[0], err)
		}
		out := strings.TrimSpace(stdout.String())
		if err := checkValue(out); err != nil {
			return nil, fmt.Errorf("%w: credential %s: command %s: %v", ErrUnavailable, s.name, s.argv[0], err)
		}
		sec := NewSecret(out)
		s.mu.Lock()
		s.value, s.expires = sec, s.now().Add(s.ttl)
		s.mu.Unlock()
		return sec, nil
	})
	if err != nil {
		return Secret{}, err
	}
	return v.(Secret), nil
}

// MaxValueLen bounds a credential value, in bytes: a header holds no
// more, and a source that produces more is broken.
const MaxValueLen = 16 << 10

// checkValue refuses a value that cannot be a header value: empty, longer
// than MaxValueLen, or with control characters (a line break would start
// another header). The error never quotes the value.
func checkValue(v string) error {
	switch {
	case v == "":
		return errors.New("empty")
	case len(v) > MaxValueLen:
		return fmt.Errorf("longer than %d bytes", MaxValueLen)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("contains a line break or another control character; want one line")
	}
	return nil
}

// limitedBuffer keeps at most max bytes and drops the rest, so a command
// that prints without end cannot exhaust memory.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
