// Package proxy is Airlock's HTTP forward proxy: the sandbox's only route
// out.
//
// For every request it identifies the sandbox: the one a session token in
// Proxy-Authorization names (broker.SessionVerifier), else the one the
// client's address maps to (policy.Config.SandboxFor); a token that does
// not verify, or none when auth.required, is answered 407. It then holds
// the request to the sandbox's limits (header size, byte quotas, request
// rate, connections; quota.go: 429, 413 or 431, reason quota_exceeded),
// checks the request's form, and decides on the canonical host and port
// (policy.Config.Decide) before any DNS lookup, so a denied name never
// reaches a resolver. Then:
//
//   - an absolute-form HTTP request (RFC 9112 §3.2.2) is decided with its
//     method and path and forwarded by goproxy through a transport whose
//     dialer resolves the host, checks every address
//     (policy.AddressRules), dials only a checked one and re-checks the
//     connected address in net.Dialer.Control; redirects are passed to the
//     client, never followed; hop-by-hop headers and Proxy-Authorization
//     are removed;
//   - a CONNECT to a host without method, path or credential rules becomes
//     an opaque tunnel through the same dialer: the client's TLS
//     ClientHello must name the CONNECT host (SNI, no Encrypted Client
//     Hello), then bytes are copied with the kernel's splice path until
//     either side closes or the tunnel idles;
//   - a CONNECT to a host with such rules is intercepted (goproxy's TLS
//     interception, leaves from certs.CA): the SNI must be the CONNECT
//     host, and every inner request must name the same authority and is
//     decided again with its method and path.
//
// On allowed plain-HTTP and intercepted requests the credential step runs
// (broker): a placeholder out of place refuses the request with an alert;
// the rule's credential is injected (or the request refused, 502, if it
// cannot be had); injected values are masked in the response.
//
// Open tunnels are registered (reload.go): a reload judges each again for
// the sandbox that opened it, closes those no longer allowed, and gives
// the others the sandbox's new limits, which tunnels read at every step.
//
// A refusal answers 403 with a plain-text body for the agent and the
// X-Airlock-Decision header; an upstream failure answers 502 without
// naming internal addresses. Each request, and each tunnel when it
// closes, produces exactly one audit.Event, with placeholders redacted.
//
// The package never follows redirects, never uses proxy settings from the
// environment, and never forwards a request it has not decided.
package proxy
