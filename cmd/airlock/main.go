// Command airlock is an egress-controlling HTTP/HTTPS forward proxy for AI
// agent sandboxes. See the README for the commands and their flags.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries an exit status through cobra without printing twice.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	root := newRootCmd()
	if err := root.Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(2)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "airlock",
		Short: "Egress control for AI agents: an allowlisting HTTP/HTTPS forward proxy",
		Long: `Airlock is the only network route out of an AI agent's sandbox: a forward proxy
that allows only the hosts its policy lists, blocks internal and cloud-metadata
addresses whatever a name resolves to, and writes one JSON audit line per request.

Point agents at it with HTTPS_PROXY=http://HOST:3128 and HTTP_PROXY=http://HOST:3128.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newPolicyCmd(), newCACmd(), newEnvCmd(), newTokenCmd(), newReloadCmd(), newAuditCmd(), newHealthcheckCmd(), newVersionCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "airlock", version)
		},
	}
}
