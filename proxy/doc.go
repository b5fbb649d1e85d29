// Package proxy is Airlock's HTTP forward proxy: the sandbox's only route
// out.
//
// For every request it identifies the sandbox (policy.Config.SandboxFor),
// checks the request's form, and decides on the canonical host and port
// (policy.Policy.Decide) before any DNS lookup, so a denied name never
// reaches a resolver. Then:
//
//   - an absolute-form HTTP request (RFC 9112 §3.2.2) is forwarded by
//     goproxy through a transport whose dialer resolves the host, checks
//     every address (policy.AddressRules), dials only a checked one and
//     re-checks the connected address in net.Dialer.Control; redirects are
//     passed to the client, never followed; hop-by-hop headers and
//     Proxy-Authorization are removed;
//   - a CONNECT becomes an opaque tunnel through the same dialer, copied
//     with the kernel's splice path and closed when idle.
//
// A refusal answers 403 with a plain-text body for the agent and the
// X-Airlock-Decision header; an upstream failure answers 502 without
// naming internal addresses. Each request, and each tunnel when it closes,
// produces exactly one audit.Event.
//
// The package never follows redirects, never uses proxy settings from the
// environment, and never forwards a request it has not decided.
package proxy
