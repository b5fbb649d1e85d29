package broker

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Session tokens are JWTs (RFC 7519) signed with Ed25519 (EdDSA, RFC 8037)
// by Airlock's own key: sub names the sandbox, and iss and aud are fixed,
// so no other JWT passes. Clients present them as proxy credentials.
const (
	SessionKeyFile  = "session.key" // the signing key's file name in a state directory
	sessionIssuer   = "airlock"
	sessionAudience = "airlock-proxy"
)

// LoadSessionKey reads the Ed25519 signing key at path (PEM, PKCS #8), or,
// when path is empty, stateDir/session.key, generating it (mode 0600) the
// first time.
func LoadSessionKey(path, stateDir string) (ed25519.PrivateKey, error) {
	if path == "" {
		path = filepath.Join(stateDir, SessionKeyFile)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(stateDir, 0o700); err != nil {
				return nil, err
			}
			_, key, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return nil, err
			}
			der, _ := x509.MarshalPKCS8PrivateKey(key)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err == nil {
				_, err = f.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil && !errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("write %s: %w", path, err)
			}
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	if err := isPrivateKeyPEM(raw); err != nil {
		return nil, fmt.Errorf("session key %s: %w", path, err)
	}
	k, err := jwt.ParseEdPrivateKeyFromPEM(raw)
	if err != nil {
		return nil, fmt.Errorf("session key %s: expected an Ed25519 private key: %w", path, err)
	}
	return k.(ed25519.PrivateKey), nil
}

// IssueSession signs a session token for sandbox, valid for ttl, and
// returns it with its ID (jti, for auth.revoked).
func IssueSession(key ed25519.PrivateKey, sandbox string, ttl time.Duration) (token, jti string, err error) {
	now := time.Now()
	jti = randomID()
	token, err = jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": sessionIssuer,
		"aud": sessionAudience,
		"sub": sandbox,
		"iat": now.Unix(),
		"exp": now.Add(ttl).Unix(),
		"jti": jti,
	}).SignedString(key)
	return token, jti, err
}

// SessionVerifier checks session tokens against Airlock's public key.
type SessionVerifier struct{ pub ed25519.PublicKey }

// NewSessionVerifier returns a verifier for tokens signed with key.
func NewSessionVerifier(key ed25519.PrivateKey) *SessionVerifier {
	return &SessionVerifier{pub: key.Public().(ed25519.PublicKey)}
}

// Session is what a verified session token says.
type Session struct {
	Sandbox string // sub: the sandbox the token names
	ID      string // jti: the token's ID, as listed in auth.revoked
}

// Verify returns the session a token carries. It fails for a token that
// is malformed, signed by another key or algorithm, expired, meant for
// someone else, or whose jti is in revoked. Errors never quote the token.
func (v *SessionVerifier) Verify(token string, revoked []string) (Session, error) {
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return v.pub, nil },
		jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithIssuer(sessionIssuer), jwt.WithAudience(sessionAudience),
		jwt.WithExpirationRequired(), jwt.WithLeeway(5*time.Second))
	if err != nil {
		return Session{}, errors.New("invalid session token: " + tokenError(err))
	}
	jti, _ := claims["jti"].(string)
	if jti == "" || slices.Contains(revoked, jti) {
		return Session{}, errors.New("the session token is revoked")
	}
	sub, _ := claims.GetSubject()
	if sub == "" {
		return Session{}, errors.New("invalid session token: no sandbox (sub)")
	}
	return Session{Sandbox: sub, ID: jti}, nil
}

// tokenError names what is wrong with a token in a word or two.
func tokenError(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "bad signature"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer), errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "not an Airlock session token"
	}
	return "rejected"
}
