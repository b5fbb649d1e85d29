package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func newHealthcheckCmd() *cobra.Command {
	var admin string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck --admin HOST:PORT",
		Short: "Exit 0 if a running Airlock answers GET /healthz on its admin listener, else 1 (for container HEALTHCHECK and exec probes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/healthz", nil)
			if err != nil {
				return fmt.Errorf("--admin %q: %w", admin, err)
			}
			// Never through a proxy from the environment: this asks Airlock itself.
			c := &http.Client{Transport: &http.Transport{Proxy: nil}}
			resp, err := c.Do(req)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "airlock healthcheck: %v\n", err)
				return exitError{1}
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				fmt.Fprintf(cmd.ErrOrStderr(), "airlock healthcheck: /healthz answered %s\n", resp.Status)
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "127.0.0.1:9090", "the admin listener (listen.admin or run --admin)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
