package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockhq/airlock/broker"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Issue session tokens that name a sandbox"}
	var configPath, sandbox, stateDir string
	var ttl time.Duration
	issue := &cobra.Command{
		Use:   "issue --sandbox NAME [--ttl 8h] [--config FILE] [--state-dir DIR]",
		Short: "Print a session token for a sandbox (its ID and expiry go to stderr)",
		Long: `Print a session token for a sandbox: a JWT signed with Airlock's key (auth.key, or the
state directory's session.key, generated the first time). The sandbox presents it as proxy
credentials: HTTPS_PROXY=http://SANDBOX:TOKEN@airlock:3128. Revoke it before it expires by
adding its ID (jti) to auth.revoked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadSandboxConfig(cmd, configPath, sandbox)
			if err != nil {
				return err
			}
			if ttl <= 0 || ttl > 30*24*time.Hour {
				fmt.Fprintln(cmd.ErrOrStderr(), "--ttl must be between 1s and 720h")
				return exitError{2}
			}
			key, err := broker.LoadSessionKey(cfg.Auth.Key, stateDir)
			if err != nil {
				return err
			}
			token, jti, err := broker.IssueSession(key, sandbox, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), token)
			fmt.Fprintf(cmd.ErrOrStderr(), "# sandbox %s, jti %s, expires %s\n", sandbox, jti, time.Now().Add(ttl).UTC().Format(time.RFC3339))
			return nil
		},
	}
	issue.Flags().StringVar(&configPath, "config", "", "policy file (YAML); default: the embedded policy")
	issue.Flags().StringVar(&sandbox, "sandbox", "default", "the sandbox the token names")
	issue.Flags().DurationVar(&ttl, "ttl", 8*time.Hour, "how long the token is valid")
	issue.Flags().StringVar(&stateDir, "state-dir", defaultStateDir(), "state directory (where session.key is)")
	cmd.AddCommand(issue)
	return cmd
}
