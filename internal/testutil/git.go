package testutil

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// GitServer is a local smart-HTTP git server over HTTPS (git http-backend
// behind net/http/cgi) serving bare repositories from Root, with pushes
// enabled. Requests are recorded like an Upstream's.
type GitServer struct {
	*Upstream
	Root string // GIT_PROJECT_ROOT
	// RequireAuth, when set before the first request, is the exact
	// Authorization header every request must carry (401 otherwise).
	RequireAuth string
}

// NewGitServer starts a git server whose certificate, issued by ca, is
// valid for names, with one repository, acme/repo.git, holding one commit.
func NewGitServer(t testing.TB, ca *CA, names ...string) *GitServer {
	t.Helper()
	git := NeedTool(t, "git")
	root := t.TempDir()
	work := t.TempDir()
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test", "GIT_CONFIG_NOSYSTEM=1", "HOME="+work)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	bare := filepath.Join(root, "acme", "repo.git")
	os.MkdirAll(filepath.Dir(bare), 0o755)
	run(root, "init", "-q", "--bare", "-b", "main", bare)
	run(bare, "config", "http.receivepack", "true")
	run(work, "init", "-q", "-b", "main", "src")
	src := filepath.Join(work, "src")
	os.WriteFile(filepath.Join(src, "README"), []byte("hello from the repository\n"), 0o644)
	run(src, "add", "README")
	run(src, "commit", "-q", "-m", "first")
	run(src, "push", "-q", bare, "main")

	backend := &cgi.Handler{
		Path: git,
		Args: []string{"http-backend"},
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=test"},
	}
	g := &GitServer{Upstream: &Upstream{}, Root: root}
	g.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.reqs = append(g.reqs, Seen{Method: r.Method, Host: r.Host, Path: r.URL.Path, Header: r.Header.Clone()})
		g.mu.Unlock()
		if g.RequireAuth != "" && r.Header.Get("Authorization") != g.RequireAuth {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	g.TLS = ca.tlsConfig(t, names...)
	g.StartTLS()
	t.Cleanup(g.Close)
	return g
}
