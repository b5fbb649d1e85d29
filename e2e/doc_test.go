// Package e2e drives the real airlock binary with real clients (curl and
// Go's net/http) against upstreams on loopback. Tests name the user story
// they prove.
package e2e
