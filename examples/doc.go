// Package examples holds deployment examples (docker-compose, Kubernetes,
// a network namespace) and the tests that check them: the manifests
// decode strictly against the Kubernetes API types, the Airlock
// configurations they carry load, and the pieces that must agree (user
// IDs, addresses, ports, the CA key never reaching the agent) do.
package examples
