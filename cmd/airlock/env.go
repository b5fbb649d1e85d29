package main

import (
	"fmt"
	"io"
	"net"
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
when the policy intercepts TLS, and one variable per credential holding the sandbox's
placeholder (never the credential). Use it as: eval "$(airlock env --sandbox agent-1)".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(configPath, nil)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			if _, ok := cfg.Sandbox(sandbox); !ok {
				fmt.Fprintf(cmd.ErrOrStderr(), "no sandbox named %q in %s\n", sandbox, cfg.File())
				return exitError{2}
			}
			if proxyAddr == "" {
				proxyAddr = string(cfg.Listen.Proxy)
			}
			return printEnv(cmd.OutOrStdout(), cfg, sandbox, proxyAddr, caPath, stateDir)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "policy file (YAML); default: the embedded policy")
	cmd.Flags().StringVar(&sandbox, "sandbox", policy.DefaultSandbox, "sandbox whose placeholders to print")
	cmd.Flags().StringVar(&proxyAddr, "proxy", "", "address the sandbox reaches Airlock at (default: listen.proxy), e.g. airlock:3128")
	cmd.Flags().StringVar(&caPath, "ca-path", "", "path of the CA certificate as the sandbox sees it (default: the file in the state directory)")
	cmd.Flags().StringVar(&stateDir, "state-dir", defaultStateDir(), "state directory (CA, placeholder key)")
	return cmd
}

func printEnv(w io.Writer, cfg *policy.Config, sandbox, proxyAddr, caPath, stateDir string) error {
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
		if caPath == "" {
			if cfg.TLS.CACert != "" {
				caPath = cfg.TLS.CACert
			} else {
				caPath = filepath.Join(stateDir, certs.CertFile)
			}
		}
		for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"} {
			export(k, caPath)
		}
	}
	if len(cfg.Credentials) > 0 {
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

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
