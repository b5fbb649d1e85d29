package e2e

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
)

func TestPolicyTestPrintsDecisionAndAddressClasses(t *testing.T) {
	bin := testutil.Binary(t)
	dns := testutil.NewDNSStub(t, map[string][]netip.Addr{
		"pub.allowed.test":    {netip.MustParseAddr("8.8.8.8")},
		"rebind.allowed.test": {netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("169.254.169.254")},
	})
	cfg := filepath.Join(t.TempDir(), "a.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
network:
  resolvers: [%q]
policies:
  default:
    allow:
      - host: "*.allowed.test"
        ports: [443]
`, dns.Addr)), 0o600)

	cases := []struct {
		target string
		exit   int
		want   []string
	}{
		{"pub.allowed.test:443", 0, []string{"decision: allow", "rule:     policies.default.allow[0]", "8.8.8.8", "allowed", "result:   allow"}},
		{"rebind.allowed.test:443", 1, []string{"decision: allow", "169.254.169.254", "blocked: cloud instance metadata", "result:   deny (address_blocked)"}},
		{"https://pub.allowed.test/", 0, []string{"port:     443", "result:   allow"}},
		{"pub.allowed.test:80", 1, []string{"decision: deny", "reason:   port_not_allowed"}},
		{"evil.test:443", 1, []string{"decision: deny", "reason:   host_not_allowed"}},
		{"http://169.254.169.254/latest/", 1, []string{"reason:   address_blocked"}},
		{"0x7f000001:443", 1, []string{"host:     127.0.0.1", "reason:   address_blocked"}},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			out, err := execOutput(bin, "policy", "test", "--config", cfg, tc.target)
			if code := exitCode(err); code != tc.exit {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.exit, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if dns.Asked("evil.test") {
		t.Error("policy test resolved a denied name")
	}
}

func TestShowDefaultPrintsAPolicyThatChecks(t *testing.T) {
	bin := testutil.Binary(t)
	out, err := exec.Command(bin, "policy", "show-default").Output()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "default.yaml")
	os.WriteFile(path, out, 0o600)
	if out, err := execOutput(bin, "policy", "check", path); err != nil {
		t.Fatalf("the printed default policy does not check: %v\n%s", err, out)
	}
	for _, host := range []string{"proxy.golang.org", "registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "crates.io",
		"deb.debian.org", "archive.ubuntu.com", "github.com", "api.github.com", "api.anthropic.com", "api.openai.com"} {
		if !strings.Contains(string(out), "host: "+host+"\n") {
			t.Errorf("default policy lacks %s", host)
		}
	}
}

func TestRunRefusesABadConfig(t *testing.T) {
	bin := testutil.Binary(t)
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("listen:\n  proxy: 127.0.0.1:0\npolicies:\n  default:\n    allow:\n      - host: \"*.co.uk\"\n"), 0o600)
	out, err := execOutput(bin, "run", "--config", path)
	if code := exitCode(err); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	if !strings.Contains(out, path+":6:15: policies.default.allow[0].host") || strings.Contains(out, "listening") {
		t.Fatalf("want a file:line:col error and no listener:\n%s", out)
	}
}

func TestVersion(t *testing.T) {
	out, err := execOutput(testutil.Binary(t), "version")
	if err != nil || !strings.HasPrefix(out, "airlock ") {
		t.Fatalf("%v: %q", err, out)
	}
}

// Every YAML example in the README must be a valid file.
func TestREADMEConfigExamplesCheck(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(readme), "```yaml\n")[1:]
	if len(blocks) < 2 {
		t.Fatalf("README has %d yaml blocks, want the configuration reference and the interception example", len(blocks))
	}
	for i, b := range blocks {
		block, _, _ := strings.Cut(b, "```")
		path := filepath.Join(t.TempDir(), fmt.Sprintf("readme-%d.yaml", i))
		os.WriteFile(path, []byte(block), 0o600)
		if out, err := execOutput(testutil.Binary(t), "policy", "check", path); err != nil {
			t.Errorf("README yaml block %d does not check: %v\n%s\n%s", i, err, out, block)
		}
	}
}

func TestPolicyTestWithMethodAndCredential(t *testing.T) {
	bin := testutil.Binary(t)
	cfg := filepath.Join(t.TempDir(), "a.yaml")
	os.WriteFile(cfg, []byte(`
tls:
  upstream_ca: missing-roots.pem
policies:
  default:
    allow:
      - host: git.example.com
        methods: [GET]
        paths: ["/acme/**"]
        credential: git
credentials:
  git:
    source: {env: AIRLOCK_TEST_SURELY_UNSET}
    hosts: [git.example.com]
`), 0o600)
	out, err := execOutput(bin, "policy", "test", "--config", cfg, "--method", "POST", "http://git.example.com/acme/repo")
	if exitCode(err) != 1 || !strings.Contains(out, "reason:   method_not_allowed") {
		t.Errorf("POST: %v\n%s", err, out)
	}
	out, _ = execOutput(bin, "policy", "test", "--config", cfg, "https://git.example.com/acme/repo")
	if !strings.Contains(out, "credential: git (injected into this request)") || !strings.Contains(out, "intercepted") {
		t.Errorf("GET:\n%s", out)
	}
	out, err = execOutput(bin, "policy", "check", cfg)
	if err != nil || !strings.Contains(out, "warning: tls.upstream_ca:") || !strings.Contains(out, "AIRLOCK_TEST_SURELY_UNSET is not set here") {
		t.Errorf("policy check warnings: %v\n%s", err, out)
	}
}

// run's --admin and --dns flags override the file's listen keys, at
// start and on reload (a reload must not see them as a listen change);
// healthcheck answers for the container HEALTHCHECK and exec probes.
func TestListenFlagsHealthcheckAndReload(t *testing.T) {
	bin := testutil.Binary(t)
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := testutil.StartProxy(t, localConfig(80), "--admin", admin, "--dns", "127.0.0.1:0")
	if p.DNSAddr == "" {
		t.Error("--dns did not start the DNS listener")
	}
	if out, err := execOutput(bin, "healthcheck", "--admin", admin); err != nil {
		t.Fatalf("healthcheck of a running Airlock: %v %s", err, out)
	}
	os.WriteFile(p.ConfigPath, []byte(localConfig(80, 81)), 0o600)
	if out, err := execOutput(bin, "reload", "--admin", admin); err != nil || !strings.Contains(out, "reloaded") {
		t.Errorf("reload with the listen flags in force: %v %s", err, out)
	}
	p.Stop(t)
	if out, err := execOutput(bin, "healthcheck", "--admin", admin, "--timeout", "2s"); exitCode(err) != 1 {
		t.Errorf("healthcheck of a stopped Airlock: %v %s; want exit status 1", err, out)
	}
	if out, err := execOutput(bin, "run", "--admin", "nonsense"); exitCode(err) == 0 || !strings.Contains(out, `--admin "nonsense": expected HOST:PORT`) {
		t.Errorf("run --admin nonsense: %v %s", err, out)
	}
}

// ca export --out and --bundle write the files a container's agent
// mounts: the certificate alone, and the system roots plus it.
func TestCAExportWritesCertAndBundle(t *testing.T) {
	dir := t.TempDir()
	out, err := execOutput(testutil.Binary(t), "ca", "export", "--state-dir", filepath.Join(dir, "state"),
		"--out", filepath.Join(dir, "ca.pem"), "--bundle", filepath.Join(dir, "bundle.pem"))
	if err != nil {
		t.Fatalf("ca export: %v %s", err, out)
	}
	cert, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	bundle, _ := os.ReadFile(filepath.Join(dir, "bundle.pem"))
	if strings.Count(string(cert), "BEGIN CERTIFICATE") != 1 || strings.Contains(string(cert), "PRIVATE KEY") {
		t.Errorf("--out holds %q; want one certificate and no key", cert)
	}
	if !bytes.HasSuffix(bundle, cert) || strings.Count(string(bundle), "BEGIN CERTIFICATE") < 2 {
		t.Errorf("--bundle does not end with the CA after the system roots (%d certificates)", strings.Count(string(bundle), "BEGIN CERTIFICATE"))
	}
	if st, err := os.Stat(filepath.Join(dir, "ca.pem")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("ca.pem mode %v, %v; want 0644", st.Mode(), err)
	}
}

// Every YAML example in docs/ must be a valid file, as in the README.
func TestDocsConfigExamplesCheck(t *testing.T) {
	pages, _ := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if len(pages) < 4 {
		t.Fatalf("docs/ has %d pages; want deploying, policies, audit-logs and threat-model", len(pages))
	}
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range strings.Split(string(text), "```yaml\n")[1:] {
			block, _, _ := strings.Cut(b, "```")
			path := filepath.Join(t.TempDir(), fmt.Sprintf("doc-%d.yaml", i))
			os.WriteFile(path, []byte(block), 0o600)
			if out, err := execOutput(testutil.Binary(t), "policy", "check", path); err != nil {
				t.Errorf("%s yaml block %d does not check: %v\n%s\n%s", page, i, err, out, block)
			}
		}
	}
}

// docs/threat-model.md names the tests that prove each mechanism: each
// must exist.
func TestThreatModelNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "threat-model.md"))
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, _ := os.ReadFile(path)
			src.Write(b)
		}
		return nil
	})
	names := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(names) < 40 {
		t.Fatalf("the threat model names %d tests; it should name the tests behind every mechanism", len(names))
	}
	for _, m := range names {
		if !strings.Contains(src.String(), "func "+m[1]+"(") {
			t.Errorf("docs/threat-model.md names %s, which is not a test", m[1])
		}
	}
}
