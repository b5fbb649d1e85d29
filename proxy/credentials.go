package proxy

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/broker"
	"github.com/airlockhq/airlock/policy"
)

// Reasons of the credential step.
const (
	reasonCredentialHostMismatch = "credential_host_mismatch" // a placeholder where it must not be, or an unbound host
	reasonCredentialUnavailable  = "credential_unavailable"   // the credential could not be had: never forward without it
	reasonCredentialRequiresTLS  = "credential_requires_tls"  // plain HTTP to a host whose rule injects a credential
	alertPlaceholder             = "placeholder_exfiltration"
)

// refusal is an answer Airlock gives instead of forwarding.
type refusal struct {
	status int
	reason string
	body   string
}

// applyCredentials is the broker step for an allowed request (DESIGN.md:
// decide -> inject -> forward). A placeholder anywhere but its own slot,
// on a host its credential is bound to, refuses the request with
// credential_host_mismatch and an alert: that is what an exfiltration
// attempt looks like. Then the rule's credential, if any, is injected; if
// it cannot be, the request is refused, never forwarded without it.
// overTLS says whether the upstream leg is TLS.
func (s *Server) applyCredentials(r *http.Request, st *reqState, sb *policy.Sandbox, h policy.Host, port uint16, d policy.Decision, overTLS bool) *refusal {
	if s.broker == nil {
		if d.Credential != "" { // cannot happen: cmd builds a broker for any config with credentials
			return &refusal{http.StatusBadGateway, reasonCredentialUnavailable, "Airlock has no credential broker.\n"}
		}
		return nil
	}
	ev := st.ev
	found, ok, err := s.broker.FindPlaceholder(r, sb.Name, d.Credential, h)
	if err != nil {
		return &refusal{http.StatusBadRequest, reasonInvalidRequest, "Airlock could not read the request body.\n"}
	}
	if ok {
		ev.Credential, ev.Alert = found.Credential, alertPlaceholder
		s.errlog.Warn("placeholder outside its slot: request refused", "sandbox", sb.Name, "credential", found.Credential,
			"where", found.Where, "server.address", h.String())
		return &refusal{http.StatusForbidden, reasonCredentialHostMismatch, denyBody(h.String(), port, reasonCredentialHostMismatch, sb.Name)}
	}
	if d.Credential == "" {
		return nil
	}
	ev.Credential = d.Credential
	inj, err := s.broker.Inject(r.Context(), r, sb.Name, d.Credential, h, overTLS)
	switch {
	case err == nil:
		st.inj = inj
		// Ask for an unencoded response: the credential, should the
		// upstream echo it, can only be masked in plain bytes.
		r.Header.Set("Accept-Encoding", "identity")
		return nil
	case errors.Is(err, broker.ErrNotBound):
		return &refusal{http.StatusForbidden, reasonCredentialHostMismatch, denyBody(h.String(), port, reasonCredentialHostMismatch, sb.Name)}
	case errors.Is(err, broker.ErrPlaintext):
		return &refusal{http.StatusForbidden, reasonCredentialRequiresTLS, denyBody(h.String(), port, reasonCredentialRequiresTLS, sb.Name)}
	}
	s.errlog.Warn("credential unavailable: request refused", "sandbox", sb.Name, "credential", d.Credential, "error", err.Error())
	return &refusal{http.StatusBadGateway, reasonCredentialUnavailable,
		"Airlock could not obtain the credential for this request, so it was not sent. Retrying later may work; the operator can see why in Airlock's log.\n"}
}

// methodOverrides are headers some frameworks read as the real method.
var methodOverrides = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// inspectedShape refuses what would let a request mean something other
// than its method and path to the upstream, on hosts with method or path
// rules: a method-override header (a POST that the server runs as
// DELETE), or a body on GET or HEAD (which a server that ignores it reads
// as the next request on the connection).
func inspectedShape(r *http.Request) *refusal {
	for _, h := range methodOverrides {
		if r.Header.Get(h) != "" {
			return &refusal{http.StatusForbidden, string(policy.MethodNotAllowed),
				"Airlock refuses method-override headers (" + h + ") where method rules apply.\n"}
		}
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.ContentLength > 0 || len(r.TransferEncoding) > 0) {
		return &refusal{http.StatusBadRequest, reasonInvalidRequest, "Airlock refuses GET and HEAD requests with a body where path rules apply.\n"}
	}
	return nil
}

// record writes ev to the audit log, with any of the sandbox's
// placeholders in request-derived fields replaced: the log must hold no
// placeholder, even one a client put in a path.
func (s *Server) record(ev *audit.Event) {
	if s.broker != nil {
		ev.Method = s.broker.Redact(ev.Sandbox, ev.Method)
		ev.Host = s.broker.Redact(ev.Sandbox, ev.Host)
		ev.Path = s.broker.Redact(ev.Sandbox, ev.Path)
		if dec, err := url.PathUnescape(ev.Path); err == nil && s.broker.Redact(ev.Sandbox, dec) != dec {
			ev.Path = s.broker.Redact(ev.Sandbox, dec) // a percent-encoded placeholder
		}
		ev.Query = s.broker.Redact(ev.Sandbox, ev.Query)
	}
	s.log.Log(ev)
	s.conns.release(ev)
}
