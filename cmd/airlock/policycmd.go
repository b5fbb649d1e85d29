package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockhq/airlock/policy"
	"github.com/airlockhq/airlock/proxy"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check, test and print policies",
	}
	cmd.AddCommand(newPolicyCheckCmd(), newPolicyTestCmd(), newPolicyShowDefaultCmd())
	return cmd
}

func newPolicyCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file: exit 0 if valid, 1 with file:line:col errors if not",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := policy.Load(args[0])
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			for _, w := range append(cfg.Warnings(), environmentWarnings(cfg)...) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%s)\n", args[0], cfg)
			return nil
		},
	}
}

func newPolicyShowDefaultCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show-default",
		Short: "Print the embedded default policy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(policy.DefaultYAML())
			return err
		},
	}
}

func newPolicyTestCmd() *cobra.Command {
	var configPath, sandbox, method string
	var allowCIDRs []string
	cmd := &cobra.Command{
		Use:   "test [--config FILE] [--sandbox NAME] URL|HOST:PORT",
		Short: "Print the decision for a destination, and for allowed names how each resolved address is classified",
		Long: `Print the decision for a destination, and for allowed names how each resolved address is classified.
Exit status: 0 reachable, 1 denied, 2 the command could not answer (bad config, bad target).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(configPath, allowCIDRs)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{2}
			}
			sb, ok := cfg.Sandbox(sandbox)
			if !ok {
				fmt.Fprintf(cmd.ErrOrStderr(), "no sandbox named %q in %s\n", sandbox, cfg.File())
				return exitError{2}
			}
			allowed, err := policyTest(cmd.Context(), cmd.OutOrStdout(), cfg, sb, args[0], method)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{2}
			}
			if !allowed {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "policy file (YAML); default: the embedded policy")
	cmd.Flags().StringVar(&sandbox, "sandbox", policy.DefaultSandbox, "sandbox whose policy to test")
	cmd.Flags().StringVar(&method, "method", "GET", "HTTP method of the request to test (URL targets)")
	cmd.Flags().StringArrayVar(&allowCIDRs, "allow-cidr", nil, "add a network.allow_cidrs exception (repeatable)")
	return cmd
}

// policyTest prints the decision for target (a URL or host:port) and, for
// an allowed destination, the addresses it resolves to with their
// classification. It reports whether the destination is reachable.
func policyTest(ctx context.Context, w io.Writer, cfg *policy.Config, sb *policy.Sandbox, target, reqMethod string) (bool, error) {
	method, path := "", ""
	var h policy.Host
	var port uint16
	var err error
	if strings.Contains(target, "://") {
		u, perr := url.Parse(target)
		if perr != nil {
			return false, fmt.Errorf("%q is not a URL: %w", target, perr)
		}
		var def uint16
		switch u.Scheme {
		case "http":
			def = 80
		case "https":
			def = 443
		default:
			return false, fmt.Errorf("scheme %q: Airlock forwards http and https only", u.Scheme)
		}
		if u.User != nil {
			return false, fmt.Errorf("%q: credentials in the URL are refused by the proxy (invalid_request)", target)
		}
		h, port, err = policy.ParseAuthority(u.Host, def)
		method, path = reqMethod, u.EscapedPath()
	} else {
		h, port, err = policy.ParseAuthority(target, 0)
	}
	if err != nil {
		return false, err
	}

	hostLevel := cfg.Decide(sb, h, port)
	d := hostLevel
	if method != "" {
		d = cfg.DecideRequest(sb, h, port, method, path)
	}
	fmt.Fprintf(w, "sandbox:  %s\n", sb.Name)
	fmt.Fprintf(w, "host:     %s\nport:     %d\n", h, port)
	verdict := "deny"
	if d.Allow {
		verdict = "allow"
	}
	fmt.Fprintf(w, "decision: %s\nreason:   %s\n", verdict, d.Reason)
	if d.Rule != "" {
		fmt.Fprintf(w, "rule:     %s\n", d.Rule)
	}
	if d.Credential != "" {
		fmt.Fprintf(w, "credential: %s (injected into this request)\n", d.Credential)
	}
	if hostLevel.Allow && hostLevel.Inspect {
		note := "HTTPS to this host is intercepted: each request is decided by its method and path"
		if method == "" {
			note += "; give a URL to test one"
		}
		fmt.Fprintf(w, "note:     %s\n", note)
	}
	if !d.Allow {
		if d.Reason == policy.AddressBlocked && h.IsIP() {
			printAddrs(w, cfg, "IP literal", []netip.Addr{h.Addr()})
		}
		return false, nil
	}

	// The host is allowed: show what the proxy's dialer would see.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, source, err := proxy.Lookup(lctx, cfg, h)
	if err != nil {
		fmt.Fprintf(w, "addresses: lookup failed: %v\n", err)
		return false, nil
	}
	reachable := printAddrs(w, cfg, source, addrs)
	if reachable {
		fmt.Fprintln(w, "result:   allow")
	} else {
		fmt.Fprintf(w, "result:   deny (%s): the proxy refuses a name with any blocked address\n", policy.AddressBlocked)
	}
	return reachable, nil
}

// printAddrs prints each address with its classification, and a hint when
// one is blocked. It reports whether all are dialable.
func printAddrs(w io.Writer, cfg *policy.Config, source string, addrs []netip.Addr) bool {
	fmt.Fprintf(w, "addresses (%s):\n", source)
	ok := len(addrs) > 0
	for _, a := range addrs {
		if err := cfg.AddressRules().Check(a); err != nil {
			why := err.Error()
			var b *policy.BlockedAddrError
			if errors.As(err, &b) {
				why = b.Why
			}
			fmt.Fprintf(w, "  %-40s blocked: %s\n", a, why)
			ok = false
			continue
		}
		fmt.Fprintf(w, "  %-40s allowed\n", a)
	}
	if !ok && len(addrs) > 0 {
		fmt.Fprintln(w, "hint:     an internal address is reachable only through an explicit network.allow_cidrs exception (or --allow-cidr)")
	}
	return ok
}
