package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockhq/airlock/certs"
	"github.com/airlockhq/airlock/policy"
)

// defaultStateDir is where Airlock keeps what it generates (the
// interception CA): $AIRLOCK_STATE_DIR, else $XDG_STATE_HOME/airlock, else
// ~/.local/state/airlock.
func defaultStateDir() string {
	if d := os.Getenv("AIRLOCK_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "airlock")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "airlock")
	}
	return "airlock-state"
}

// caPaths returns the CA files a configuration uses: tls.ca_cert and
// tls.ca_key if set, else those in stateDir, generated there if missing.
func caPaths(cfg *policy.Config, stateDir string) (certPath, keyPath string, err error) {
	if cfg.TLS.CACert != "" {
		return cfg.TLS.CACert, cfg.TLS.CAKey, nil
	}
	certPath, keyPath, _, err = certs.Init(stateDir)
	return certPath, keyPath, err
}

func newCACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Create and export the TLS interception CA",
	}
	var dir string
	initCmd := &cobra.Command{
		Use:   "init [--state-dir DIR]",
		Short: "Generate the interception CA into DIR (default: the state directory) unless one is there",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certPath, keyPath, created, err := certs.Init(dir)
			if err != nil {
				return err
			}
			verb := "kept the existing"
			if created {
				verb = "created a new"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s CA\ncertificate: %s   (give this to the sandbox's trust store)\nkey:         %s   (keep this out of the sandbox)\n", verb, certPath, keyPath)
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "state-dir", defaultStateDir(), "directory for "+certs.CertFile+" and "+certs.KeyFile)
	initCmd.Flags().StringVar(&dir, "dir", defaultStateDir(), "same as --state-dir")

	var configPath, exportDir, outPath, bundlePath string
	exportCmd := &cobra.Command{
		Use:   "export [--config FILE] [--state-dir DIR] [--out FILE] [--bundle FILE]",
		Short: "Print the CA certificate (PEM) for the sandbox's trust store, generating the CA if needed",
		Long: `Print the CA certificate (PEM) for the sandbox's trust store, generating the CA if needed.
--out writes it to FILE instead; --bundle also writes FILE with the system roots followed
by the CA, for SSL_CERT_FILE and the like, which replace the system roots rather than add
to them. Both files are mode 0644: they hold no key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(configPath, nil)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			certPath, keyPath, err := caPaths(cfg, exportDir)
			if err != nil {
				return err
			}
			ca, err := certs.Load(certPath, keyPath, 1)
			if err != nil {
				return err
			}
			if bundlePath != "" {
				roots := systemRoots()
				if roots == nil {
					return fmt.Errorf("--bundle: no system CA bundle found (looked in %s)", strings.Join(systemRootFiles, ", "))
				}
				if err := os.WriteFile(bundlePath, append(roots, ca.CertPEM()...), 0o644); err != nil {
					return err
				}
			}
			if outPath != "" {
				return os.WriteFile(outPath, ca.CertPEM(), 0o644)
			}
			_, err = cmd.OutOrStdout().Write(ca.CertPEM())
			return err
		},
	}
	exportCmd.Flags().StringVar(&outPath, "out", "", "write the certificate to FILE instead of standard output")
	exportCmd.Flags().StringVar(&bundlePath, "bundle", "", "also write FILE: the system roots followed by the certificate")
	exportCmd.Flags().StringVar(&configPath, "config", "", "policy file whose tls.ca_cert to export; default: the state directory's CA")
	exportCmd.Flags().StringVar(&exportDir, "state-dir", defaultStateDir(), "state directory")
	exportCmd.Flags().StringVar(&exportDir, "dir", defaultStateDir(), "same as --state-dir")
	cmd.AddCommand(initCmd, exportCmd)
	return cmd
}
