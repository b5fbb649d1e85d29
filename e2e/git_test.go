package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
)

// The README's example: an agent may clone and fetch the organisation's
// repositories over HTTPS through Airlock, but never push.
func TestGitCloneWorksAndPushIsRefusedThroughAirlock(t *testing.T) {
	git := testutil.NeedTool(t, "git")
	upCA := testutil.NewCA(t)
	srv := testutil.NewGitServer(t, upCA, "git.test")
	dir := t.TempDir()
	p := testutil.StartProxy(t, fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {git.test: 127.0.0.1}
tls:
  upstream_ca: %s
policies:
  default:
    allow:
      - host: git.test
        ports: [%[2]d]
        methods: [GET, POST]
        paths: ["/acme/*/info/refs", "/acme/*/git-upload-pack", "/acme/*/git-receive-pack"]
    deny:
      - host: git.test
        paths: ["/**/git-receive-pack"]
`, upCA.WritePEM(t, dir), srv.Port()))
	caPEM, err := execOutputOnly(testutil.Binary(t), "ca", "export", "--dir", p.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "airlock-ca.pem")
	os.WriteFile(caFile, []byte(caPEM), 0o644)

	// The client knows only the proxy and Airlock's CA: no credential, no
	// route of its own.
	env := append(os.Environ(),
		"HTTPS_PROXY="+p.URL(), "https_proxy="+p.URL(), "NO_PROXY=", "no_proxy=",
		"GIT_SSL_CAINFO="+caFile, "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.test",
		"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.test")
	gitRun := func(wd string, args ...string) (string, error) {
		cmd := exec.Command(git, args...)
		cmd.Dir, cmd.Env = wd, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	url := fmt.Sprintf("https://git.test:%d/acme/repo.git", srv.Port())
	if out, err := gitRun(dir, "clone", url, "clone"); err != nil {
		t.Fatalf("git clone through Airlock: %v\n%s", err, out)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "clone", "README"))
	if err != nil || string(readme) != "hello from the repository\n" {
		t.Fatalf("cloned README: %q %v", readme, err)
	}
	if out, err := gitRun(filepath.Join(dir, "clone"), "fetch", "origin"); err != nil {
		t.Fatalf("git fetch: %v\n%s", err, out)
	}

	os.WriteFile(filepath.Join(dir, "clone", "evil"), []byte("exfiltrated\n"), 0o644)
	gitRun(filepath.Join(dir, "clone"), "add", "evil")
	gitRun(filepath.Join(dir, "clone"), "commit", "-q", "-m", "push attempt")
	out, err := gitRun(filepath.Join(dir, "clone"), "push", "origin", "HEAD:main")
	if err == nil {
		t.Fatalf("git push succeeded through Airlock:\n%s", out)
	}
	if !strings.Contains(out, "403") {
		t.Errorf("git push output does not show the refusal:\n%s", out)
	}
	for _, r := range srv.Requests() {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/git-receive-pack") {
			t.Errorf("the git server received a push: %s %s", r.Method, r.Path)
		}
	}
	found := false
	for _, ev := range p.Audit(t) {
		if ev["reason"] == "denied_by_rule" && strings.HasSuffix(fmt.Sprint(ev["url.path"]), "/git-receive-pack") {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit line for the refused push:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
}

// The git server requires a token; the sandbox has none. Airlock injects
// it on the way, and the clone works.
func TestGitCloneThroughAirlockWithInjectedToken(t *testing.T) {
	git := testutil.NeedTool(t, "git")
	upCA := testutil.NewCA(t)
	srv := testutil.NewGitServer(t, upCA, "git.test")
	srv.RequireAuth = "Bearer " + realToken
	dir := t.TempDir()
	t.Setenv("AIRLOCK_E2E_TOKEN", realToken)
	p := testutil.StartProxy(t, fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {git.test: 127.0.0.1}
tls:
  upstream_ca: %s
policies:
  default:
    allow:
      - host: git.test
        ports: [%[2]d]
        methods: [GET, POST]
        paths: ["/acme/*/info/refs", "/acme/*/git-upload-pack"]
        credential: git
credentials:
  git:
    source: {env: AIRLOCK_E2E_TOKEN}
    hosts: [git.test]
    placeholder: %s
`, upCA.WritePEM(t, dir), srv.Port(), placeholder))
	caPEM, _ := execOutputOnly(testutil.Binary(t), "ca", "export", "--dir", p.StateDir)
	caFile := filepath.Join(dir, "airlock-ca.pem")
	os.WriteFile(caFile, []byte(caPEM), 0o644)

	cmd := exec.Command(git, "clone", fmt.Sprintf("https://git.test:%d/acme/repo.git", srv.Port()), filepath.Join(dir, "clone"))
	cmd.Env = append(os.Environ(), "HTTPS_PROXY="+p.URL(), "https_proxy="+p.URL(), "NO_PROXY=", "no_proxy=",
		"GIT_SSL_CAINFO="+caFile, "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_TERMINAL_PROMPT=0", "AIRLOCK_E2E_TOKEN=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git clone with an injected token: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "clone", "README")); string(b) != "hello from the repository\n" {
		t.Fatalf("README: %q", b)
	}
	for _, r := range srv.Requests() {
		if r.Header.Get("Authorization") != "Bearer "+realToken {
			t.Errorf("%s %s reached the server without the token", r.Method, r.Path)
		}
	}
	noSecretsInLogs(t, p)
}
