package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockhq/airlock/broker"
	"github.com/airlockhq/airlock/certs"
	"github.com/airlockhq/airlock/policy"
)

func newEnvCmd() *cobra.Command {
	var configPath, sandbox, proxyAddr, caPath, stateDir string
	cmd := &cobra.Command{
		Use:   "env [--config FILE] [--sandbox NAME] [--proxy HOST:PORT] [--ca-path PATH]",
		Short: "Print the environment a sandbox needs: proxy variables, CA trust variables, credential placeholders",
		Long: `Print, as shell export lines, the environment a sandbox needs to use Airlock:
HTTPS_PROXY and HTTP_PROXY (and lower-case forms), NO_PROXY, the CA certificate for
SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, GIT_SSL_CAINFO and CURL_CA_BUNDLE
when the policy intercepts TLS (a bundle of the system roots and Airlock's CA, written
into the state directory), and one variable per credential holding the sandbox's
placeholder (never the credential). Use it as: eval "$(airlock env --sandbox agent-1)".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadSandboxConfig(cmd, configPath, sandbox)
			if err != nil {
				return err
			}
			if proxyAddr == "" {
				proxyAddr = string(cfg.Listen.Proxy)
			}
			return printEnv(cmd.OutOrStdout(), cmd.ErrOrStderr(), cfg, sandbox, proxyAddr, caPath, stateDir)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "policy file (YAML); default: the embedded policy")
	cmd.Flags().StringVar(&sandbox, "sandbox", policy.DefaultSandbox, "sandbox whose placeholders to print")
	cmd.Flags().StringVar(&proxyAddr, "proxy", "", "address the sandbox reaches Airlock at (default: listen.proxy), e.g. airlock:3128")
	cmd.Flags().StringVar(&caPath, "ca-path", "", "path of the CA bundle as the sandbox sees it (default: STATE_DIR/ca-bundle.pem; the bundle, system roots plus Airlock's CA, is written there now either way)")
	cmd.Flags().StringVar(&stateDir, "state-dir", defaultStateDir(), "state directory (CA, placeholder key)")
	return cmd
}

func printEnv(w, warn io.Writer, cfg *policy.Config, sandbox, proxyAddr, caPath, stateDir string) error {
	host, port, err := net.SplitHostPort(proxyAddr)
	if err != nil {
		return fmt.Errorf("--proxy %q: expected HOST:PORT", proxyAddr)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	proxyURL := "http://" + net.JoinHostPort(host, port)
	export := func(k, v string) { fmt.Fprintf(w, "export %s=%s\n", k, shellQuote(v)) }
	for _, k := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
		export(k, proxyURL)
	}
	export("NO_PROXY", "localhost,127.0.0.1,::1")
	export("no_proxy", "localhost,127.0.0.1,::1")

	if cfg.NeedsInterception() || cfg.TLS.CACert != "" {
		// Written whether or not --ca-path names where the sandbox sees
		// it: the operator copies or mounts it there.
		bundle, note, err := writeCABundle(cfg, stateDir)
		if err != nil {
			return err
		}
		if note != "" {
			fmt.Fprintln(warn, "airlock env:", note)
		}
		if caPath == "" {
			caPath = bundle
		}
		// One bundle, system roots plus Airlock's CA: these variables
		// replace the system roots for most tools, and opaque (not
		// intercepted) hosts still need them.
		for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"} {
			export(k, caPath)
		}
	}
	if len(cfg.Credentials) > 0 {
		if _, err := os.Stat(filepath.Join(stateDir, broker.KeyFile)); os.IsNotExist(err) {
			fmt.Fprintf(warn, "airlock env: created a new placeholder key in %s: run the proxy with --state-dir %s (or AIRLOCK_STATE_DIR) so that it expects these placeholders\n", stateDir, stateDir)
		}
		key, err := broker.LoadKey(stateDir)
		if err != nil {
			return fmt.Errorf("placeholder key: %w", err)
		}
		b, err := broker.New(cfg, key, nil) // placeholders only: no minting here
		if err != nil {
			return err
		}
		for _, name := range b.Names() {
			ph, env, _ := b.Placeholder(sandbox, name)
			fmt.Fprintf(w, "# placeholder for credential %s: Airlock swaps it for the real value on its bound hosts only\n", name)
			export(env, ph)
		}
	}
	return nil
}

// systemRootFiles are where Linux distributions (Debian/Ubuntu,
// Fedora/RHEL, Alpine) keep the system CA bundle.
var systemRootFiles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// systemRoots returns the first system CA bundle found (PEM, with a
// trailing newline), or nil.
func systemRoots() []byte {
	for _, f := range systemRootFiles {
		if b, err := os.ReadFile(f); err == nil {
			return append(b, '\n')
		}
	}
	return nil
}

// writeCABundle writes stateDir/ca-bundle.pem: the system roots followed by
// Airlock's CA certificate (generated into stateDir if the configuration
// names none and there is none yet). It returns the path and a note for
// the operator when something was created or no system roots were found.
func writeCABundle(cfg *policy.Config, stateDir string) (string, string, error) {
	var note string
	if cfg.TLS.CACert == "" {
		if _, err := os.Stat(filepath.Join(stateDir, certs.CertFile)); os.IsNotExist(err) {
			note = fmt.Sprintf("created a new interception CA in %s: run the proxy with --state-dir %s (or AIRLOCK_STATE_DIR) so that it signs with it", stateDir, stateDir)
		}
	}
	certPath, keyPath, err := caPaths(cfg, stateDir)
	if err != nil {
		return "", "", err
	}
	ca, err := certs.Load(certPath, keyPath, 1)
	if err != nil {
		return "", "", err
	}
	bundle := systemRoots()
	if bundle == nil {
		note = strings.TrimSpace(note + "; no system CA bundle found: the CA variables hold Airlock's CA alone, so opaque (not intercepted) hosts will not verify")
	}
	bundle = append(bundle, ca.CertPEM()...)
	path := filepath.Join(stateDir, "ca-bundle.pem")
	if err := os.WriteFile(path, bundle, 0o644); err != nil {
		return "", "", err
	}
	return path, note, nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// loadSandboxConfig loads the policy file at path (the embedded policy if
// empty) and checks that it has the named sandbox. Its errors are printed
// to cmd's stderr and returned as exit codes: 1 for a bad file, 2 for an
// unknown sandbox.
func loadSandboxConfig(cmd *cobra.Command, path, sandbox string) (*policy.Config, error) {
	cfg, err := loadConfig(path, nil)
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), err)
		return nil, exitError{1}
	}
	if _, ok := cfg.Sandbox(sandbox); !ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "no sandbox named %q in %s\n", sandbox, cfg.File())
		return nil, exitError{2}
	}
	return cfg, nil
}
