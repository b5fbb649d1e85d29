package broker

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestSessionKeyIsGeneratedOncePrivately(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	k1, err := LoadSessionKey("", dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, SessionKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("session.key: %v, mode %v; want 0600", err, fi.Mode())
	}
	k2, err := LoadSessionKey("", dir)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("second load: %v; same key: %v", err, k1.Equal(k2))
	}
	bad := filepath.Join(t.TempDir(), "bad.key")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	if _, err := LoadSessionKey(bad, ""); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad key file: %v; want an error naming %s", err, bad)
	}
}

func TestSessionVerifyRefusesWhatItDidNotIssue(t *testing.T) {
	key, err := LoadSessionKey("", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := LoadSessionKey("", t.TempDir())
	v := NewSessionVerifier(key)

	good, jti, err := IssueSession(key, "agent-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if sess, err := v.Verify(good, nil); err != nil || sess.Sandbox != "agent-1" || sess.ID == "" {
		t.Fatalf("Verify(good) = %+v, %v", sess, err)
	}
	forged, _, _ := IssueSession(other, "agent-1", time.Hour)
	expired, _, _ := IssueSession(key, "agent-1", -time.Minute)
	sign := func(m jwt.SigningMethod, k any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exp := time.Now().Add(time.Hour).Unix()
	// Algorithm confusion: HMAC keyed with the public key's bytes.
	hs := sign(jwt.SigningMethodHS256, []byte(key.Public().(ed25519.PublicKey)), jwt.MapClaims{"iss": "airlock", "aud": "airlock-proxy", "sub": "agent-1", "exp": exp, "jti": "x"})
	wrongAud := sign(jwt.SigningMethodEdDSA, key, jwt.MapClaims{"iss": "airlock", "aud": "someone-else", "sub": "agent-1", "exp": exp, "jti": "x"})
	noExp := sign(jwt.SigningMethodEdDSA, key, jwt.MapClaims{"iss": "airlock", "aud": "airlock-proxy", "sub": "agent-1", "jti": "x"})
	noSub := sign(jwt.SigningMethodEdDSA, key, jwt.MapClaims{"iss": "airlock", "aud": "airlock-proxy", "exp": exp, "jti": "x"})
	noJTI := sign(jwt.SigningMethodEdDSA, key, jwt.MapClaims{"iss": "airlock", "aud": "airlock-proxy", "sub": "agent-1", "exp": exp})

	for _, c := range []struct{ name, token, want string }{
		{"forged", forged, "bad signature"},
		{"expired", expired, "expired"},
		{"hs256", hs, "invalid session token"},
		{"wrong audience", wrongAud, "not an Airlock session token"},
		{"no exp", noExp, "invalid session token"},
		{"no sub", noSub, "no sandbox"},
		{"no jti", noJTI, "revoked"},
		{"garbage", "a.b.c", "malformed"},
	} {
		_, err := v.Verify(c.token, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), c.token) {
			t.Errorf("%s: the error quotes the token", c.name)
		}
	}
	if _, err := v.Verify(good, []string{"other", jti}); err == nil {
		t.Error("a revoked jti verified")
	}
}
