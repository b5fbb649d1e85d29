package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/airlockhq/airlock/policy"
)

// environmentWarnings lists what a valid configuration needs from the
// machine it runs on and does not find here: files it names (CA, upstream
// roots, credential files and keys) and environment variables credentials
// read. policy check and run print them as warnings: a file may exist
// only where the proxy runs, and a variable may be set later.
func environmentWarnings(cfg *policy.Config) []string {
	var out []string
	file := func(key, path string) {
		if path == "" {
			return
		}
		if _, err := os.Stat(path); err != nil {
			out = append(out, fmt.Sprintf("%s: %s: %v", key, path, errorText(err)))
		}
	}
	env := func(key, name string) {
		if name != "" && os.Getenv(name) == "" {
			out = append(out, fmt.Sprintf("%s: environment variable %s is not set here; requests that need it will get 502 credential_unavailable", key, name))
		}
	}
	file("tls.ca_cert", cfg.TLS.CACert)
	file("tls.ca_key", cfg.TLS.CAKey)
	file("tls.upstream_ca", cfg.TLS.UpstreamCA)
	names := make([]string, 0, len(cfg.Credentials))
	for n := range cfg.Credentials {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		src := cfg.Credentials[n].Source
		k := "credentials." + n + ".source"
		file(k+".file", src.File)
		env(k+".env", src.Env)
		if j := src.JWT; j != nil {
			file(k+".jwt.key.file", j.Key.File)
			env(k+".jwt.key.env", j.Key.Env)
		}
		if o := src.OAuth2; o != nil {
			file(k+".oauth2.client_secret.file", o.ClientSecret.File)
			env(k+".oauth2.client_secret.env", o.ClientSecret.Env)
		}
		if g := src.GitHubApp; g != nil {
			file(k+".github_app.private_key.file", g.PrivateKey.File)
			env(k+".github_app.private_key.env", g.PrivateKey.Env)
		}
	}
	return out
}

func errorText(err error) string {
	if os.IsNotExist(err) {
		return "no such file here"
	}
	return err.Error()
}
