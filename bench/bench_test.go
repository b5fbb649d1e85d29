package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(upstreamEnv); dir != "" {
		if err := serveUpstream(dir); err != nil {
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// The harness runs every scenario end to end (briefly, Airlock and direct
// only: CI has no Squid or tinyproxy) and every request succeeds.
func TestHarnessRunsEveryScenario(t *testing.T) {
	var out strings.Builder
	err := run(&out, 300*time.Millisecond, 1, 4, 50, 4<<20, false, "", testutil.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	for _, want := range []string{"(`http`)", "(`https`)", "(`newtunnel`)", "(`intercept`)", "(`bulk1`)", "(`bulk4`)", "(`idle`)", "(`dns-cached`)", "(`dns-forwarded`)",
		"| airlock | 50 | 0 |"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	for _, line := range strings.Split(report, "\n") {
		if !strings.HasPrefix(line, "| airlock") && !strings.HasPrefix(line, "| direct") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		errors := cells[len(cells)-1] // request and bulk tables end with their errors
		if len(cells) == 4 {
			errors = cells[2] // idle tunnels: target, held, failed, RSS per tunnel
		}
		if errors != "0" {
			t.Errorf("failures in: %s", line)
		}
	}
}
