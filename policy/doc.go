// Package policy decides where a sandbox may connect.
//
// It owns the configuration contract (DESIGN.md, "Configuration contract"):
// Parse and Load decode one YAML file strictly, validate it and compile it
// into a *Config whose errors name file:line:col, the key path and what was
// expected. From a Config come:
//
//   - canonical hosts (ParseHost, ParseAuthority): lower-case A-label names
//     or IP addresses, with every numeric form a C resolver accepts turned
//     into the address it means, so nothing matches an uncanonicalised
//     string;
//   - host-level and request-level decisions (Policy.Decide,
//     Policy.DecideRequest), made by map lookups on the host before any DNS
//     lookup, never by scanning the rule list, with no allocation;
//   - address checks (AddressRules.Check) against the IANA special-purpose
//     registries, cloud metadata addresses and the operator's CIDRs,
//     with IPv4 embedded in IPv6 unwrapped.
//
// The package does no I/O beyond reading the configuration file, never
// resolves names, and imports nothing else of Airlock's.
package policy
