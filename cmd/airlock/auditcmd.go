package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockhq/airlock/audit"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Read audit logs: summarise them, or suggest a policy from them"}
	cmd.AddCommand(newAuditSummaryCmd(), newAuditSuggestCmd())
	return cmd
}

// auditFlags are the filters both audit commands take.
type auditFlags struct {
	since     string
	sandboxes []string
}

func (f *auditFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.since, "since", "", "only events at or after this time: a duration back from now (24h, 90m) or an RFC 3339 time or date (2026-11-29T10:00:00Z, 2026-11-29)")
	cmd.Flags().StringArrayVar(&f.sandboxes, "sandbox", nil, "only this sandbox (repeatable)")
}

// sinceTime parses --since.
func (f *auditFlags) sinceTime(now time.Time) (time.Time, error) {
	if f.since == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(f.since); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, f.since); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: give a duration (24h) or an RFC 3339 time or date (2026-11-29T10:00:00Z, 2026-11-29)", f.since)
}

// readLogs reads each file (stdin for none or "-"), gzip or not, into
// fn. A file that cannot be read is reported on stderr and the others are
// still read; the result says whether every file was read to its end.
func readLogs(cmd *cobra.Command, files []string, fn func(*audit.Record)) (audit.ReadStats, bool) {
	if len(files) == 0 {
		files = []string{"-"}
	}
	var total audit.ReadStats
	ok := true
	for _, name := range files {
		var r io.Reader = cmd.InOrStdin()
		label := "<stdin>"
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "airlock audit:", err)
				ok = false
				continue
			}
			defer f.Close()
			r, label = f, name
		}
		st, err := audit.Read(r, label, fn)
		total.Lines += st.Lines
		total.Malformed += st.Malformed
		total.Examples = append(total.Examples, st.Examples...)
		if err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "airlock audit:", err)
			ok = false
		}
	}
	return total, ok
}

func newAuditSummaryCmd() *cobra.Command {
	var flags auditFlags
	var format string
	cmd := &cobra.Command{
		Use:   "summary [FILE...] [--format table|json|markdown] [--since TIME] [--sandbox NAME]",
		Short: "Summarise audit logs per sandbox: hosts reached, bytes, statuses, denials, credentials, DNS refusals, alerts",
		Long: `Summarise audit logs (stdin when no FILE; gzip files are read as they are) per sandbox:
hosts reached with request and tunnel counts, bytes both ways and status classes;
denials and report-mode would_deny by reason and host; credential uses; DNS
refusals; alerts; limits hit; the time range. Lines that are not audit events are
counted and the first few reported, never fatal. Memory grows with the number of
distinct hosts, not with the size of the logs.
Exit status: 0, or 1 when a file could not be read (the summary of the rest is
still printed), 2 for bad flags.`,
		RunE: func(cmd *cobra.Command, files []string) error {
			since, err := flags.sinceTime(time.Now())
			if err != nil {
				return err
			}
			if format != audit.FormatTable && format != audit.FormatJSON && format != audit.FormatMarkdown {
				return fmt.Errorf("--format %q: use table, json or markdown", format)
			}
			z := audit.NewSummarizer(audit.SummaryOptions{Since: since, Sandboxes: flags.sandboxes})
			st, ok := readLogs(cmd, files, z.Add)
			z.Stats(st)
			if err := audit.WriteSummary(cmd.OutOrStdout(), z.Summary(), format); err != nil {
				return err
			}
			if !ok {
				return exitError{1}
			}
			return nil
		},
	}
	flags.register(cmd)
	cmd.Flags().StringVar(&format, "format", audit.FormatTable, "output format: table, json or markdown")
	return cmd
}

func newAuditSuggestCmd() *cobra.Command {
	var flags auditFlags
	var foldMin int
	cmd := &cobra.Command{
		Use:   "suggest [FILE...] [--since TIME] [--sandbox NAME] [--fold-min N]",
		Short: "Print a policy (YAML) that allows what the audit logs show was reached, and nothing else",
		Long: `Print a policy (YAML, accepted by 'airlock policy check') built from audit logs,
typically of report mode: one allow rule per host and port that was reached
(allowed, or would_deny in report mode), with a comment giving counts and when it
was first and last seen. Never an internal address or name, never a host seen
only in refused requests or named by a deny rule, never a host (on any port)
with an address_blocked, authority_mismatch, credential_host_mismatch or
proxy_loop refusal or an alert, DNS alerts included. Names
fold into a *.domain rule only when --fold-min of them share a registrable domain
(never a public suffix or a multi-tenant cloud domain) under which nothing was
refused. The output is sorted: the same logs give the same file.
Exit status: 0, 1 when a file could not be read, 2 for bad flags.`,
		RunE: func(cmd *cobra.Command, files []string) error {
			since, err := flags.sinceTime(time.Now())
			if err != nil {
				return err
			}
			z := audit.NewSuggester(audit.SuggestOptions{Since: since, Sandboxes: flags.sandboxes, FoldMin: foldMin})
			st, ok := readLogs(cmd, files, z.Add)
			if st.Malformed > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "airlock audit suggest: skipped %d malformed lines, e.g. %s\n", st.Malformed, st.Examples[0])
			}
			if err := z.WriteYAML(cmd.OutOrStdout()); err != nil {
				return err
			}
			if !ok {
				return exitError{1}
			}
			return nil
		},
	}
	flags.register(cmd)
	cmd.Flags().IntVar(&foldMin, "fold-min", audit.DefaultFoldMin, "names under one registrable domain that fold into a *.domain rule; -1: never fold")
	return cmd
}
