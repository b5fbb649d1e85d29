package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
)

// Formats of a summary.
const (
	FormatTable    = "table"
	FormatJSON     = "json"
	FormatMarkdown = "markdown"
)

// WriteSummary writes s in format: FormatTable (aligned plain text),
// FormatMarkdown (GitHub-flavoured tables) or FormatJSON (one object,
// byte counts exact). An unknown format is an error.
func WriteSummary(w io.Writer, s Summary, format string) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	case FormatTable, FormatMarkdown:
		return writeText(w, s, format == FormatMarkdown)
	}
	return fmt.Errorf("unknown format %q: use table, json or markdown", format)
}

// section is one table of a text summary.
type section struct {
	title  string
	header []string
	rows   [][]string
}

func writeText(w io.Writer, s Summary, md bool) error {
	var b strings.Builder
	if md {
		b.WriteString("# Airlock audit summary\n\n")
	}
	fmt.Fprintf(&b, "%d lines, %d malformed; %s\n", s.Lines, s.Malformed, span(s.From, s.To))
	for _, e := range s.Examples {
		fmt.Fprintf(&b, "  malformed: %s\n", e)
	}
	for _, sb := range s.Sandboxes {
		if md {
			fmt.Fprintf(&b, "\n## Sandbox %s\n\n", sb.Sandbox)
		} else {
			fmt.Fprintf(&b, "\nSANDBOX %s\n", sb.Sandbox)
		}
		fmt.Fprintf(&b, "%d requests, %d tunnels, %d DNS queries; %s\n", sb.Requests, sb.Tunnels, sb.DNSQueries, span(sb.From, sb.To))
		hosts := section{title: "Hosts reached", header: []string{"host", "port", "requests", "tunnels", "sent", "received", "2xx", "3xx", "4xx", "5xx", "would_deny"}}
		for _, h := range sb.Hosts {
			hosts.rows = append(hosts.rows, []string{h.Host, fmt.Sprint(h.Port), fmt.Sprint(h.Requests), fmt.Sprint(h.Tunnels),
				humanize.IBytes(uint64(h.BytesSent)), humanize.IBytes(uint64(h.BytesReceived)),
				fmt.Sprint(h.Status["2xx"]), fmt.Sprint(h.Status["3xx"]), fmt.Sprint(h.Status["4xx"]), fmt.Sprint(h.Status["5xx"]), fmt.Sprint(h.WouldDeny)})
		}
		for _, sec := range []section{
			hosts,
			countSection("Denied", "reason", true, sb.Denials),
			countSection("Would be denied (report mode)", "reason", true, sb.WouldDeny),
			countSection("Credentials used", "credential", false, sb.Credentials),
			countSection("DNS refusals", "reason", true, sb.DNSRefusals),
			countSection("Alerts", "alert", true, sb.Alerts),
			countSection("Limits hit", "limit", false, sb.Limits),
		} {
			if len(sec.rows) == 0 {
				continue
			}
			writeSection(&b, sec, md)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func countSection(title, key string, withHost bool, cs []Count) section {
	sec := section{title: title, header: []string{key, "count"}}
	if withHost {
		sec.header = []string{key, "host", "count"}
	}
	for _, c := range cs {
		row := []string{c.Key, fmt.Sprint(c.Count)}
		if withHost {
			host := c.Host
			if c.Port != 0 {
				host = fmt.Sprintf("%s:%d", c.Host, c.Port)
			}
			row = []string{c.Key, host, fmt.Sprint(c.Count)}
		}
		sec.rows = append(sec.rows, row)
	}
	return sec
}

func writeSection(b *strings.Builder, sec section, md bool) {
	if md {
		fmt.Fprintf(b, "\n### %s\n\n| %s |\n|%s\n", sec.title, strings.Join(sec.header, " | "), strings.Repeat("---|", len(sec.header)))
		for _, r := range sec.rows {
			for i := range r {
				r[i] = mdCell(r[i])
			}
			fmt.Fprintf(b, "| %s |\n", strings.Join(r, " | "))
		}
		return
	}
	fmt.Fprintf(b, "\n  %s\n", strings.ToUpper(sec.title))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\n", strings.ToUpper(strings.Join(sec.header, "\t")))
	for _, r := range sec.rows {
		fmt.Fprintf(tw, "  %s\n", strings.Join(r, "\t"))
	}
	tw.Flush()
}

// mdCell makes a log value safe in a Markdown table cell: numbers and
// sizes as they are, anything else as a code span, so that a name a
// sandbox chose ("<https://evil.example>", "**urgent**") renders as text,
// never as a link, emphasis or HTML.
func mdCell(v string) string {
	if v == "" || strings.Trim(v, "0123456789. KMGTiB") == "" {
		return v
	}
	v = strings.NewReplacer("`", "'", "|", "¦", "\n", " ", "\r", " ").Replace(v)
	return "`" + v + "`"
}

// span formats a time range.
func span(from, to time.Time) string {
	if from.IsZero() {
		return "no events"
	}
	return from.UTC().Format(time.RFC3339) + " to " + to.UTC().Format(time.RFC3339)
}
