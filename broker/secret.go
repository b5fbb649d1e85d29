// Package broker holds the credentials Airlock injects into allowed
// requests, so that real secrets never enter the sandbox.
//
// A credential's value comes from a Source (an environment variable of
// Airlock's process, a file re-read when it changes, or a command such as
// `gh auth token` run with a timeout and cached for a TTL). Inject writes
// it into the slot the configuration names (a header and a format), and
// only for a request to a host the credential is bound to; whatever the
// client put in that slot is replaced. The sandbox holds at most a
// placeholder: FindPlaceholder reports one seen anywhere else, which is
// what an exfiltration attempt looks like. Scrub removes injected values
// that an upstream reflects in its response.
//
// Values are Secrets: they print, format and marshal as "[redacted]", and
// only Reveal, called at injection, gives the value. The package never
// logs; callers log credential names only.
package broker

import "strconv"

// redacted is what a Secret shows in place of its value.
const redacted = "[redacted]"

// Secret is a credential value. Its String, GoString, MarshalJSON and
// MarshalText give "[redacted]"; Reveal is the one way to the value, used
// where it is injected. The value sits behind a pointer so that even fmt's
// reflection over an unexported Secret field (which cannot call String)
// shows an address, not the value.
type Secret struct{ p *string }

// NewSecret wraps v.
func NewSecret(v string) Secret { return Secret{p: &v} }

// Reveal returns the value. Call it only to put the value on the wire.
func (s Secret) Reveal() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.Reveal() == "" }

// String returns "[redacted]".
func (s Secret) String() string { return redacted }

// GoString returns "[redacted]", for %#v.
func (s Secret) GoString() string { return redacted }

// MarshalJSON returns the JSON string "[redacted]" (and so does zerolog's
// Interface, which uses it).
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(redacted)), nil }

// MarshalText returns "[redacted]".
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
