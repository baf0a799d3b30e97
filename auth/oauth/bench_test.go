package oauth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/auth/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

// BenchmarkAuthenticate is what checking a request's credentials costs
// the listener, per request: a static token (the baseline), an access
// token whose verdict is cached (every request after a client's first),
// and an access token seen for the first time (the cache's miss path:
// the header and claims decoded, the RS256 signature verified, the
// claims checked, the verdict stored). The issuer's keys are fetched
// before the timer starts, as a running server holds them.
//
//	go test ./auth/oauth -run X -bench Authenticate -benchmem
func BenchmarkAuthenticate(b *testing.B) {
	const scope = "mcp:tools"
	claims := oauthtest.Claims{Subject: "alice", Audience: []string{resource}, Scope: scope}
	request := func(token string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, resource, nil)
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	run := func(b *testing.B, a auth.Authenticator, reqs []*http.Request) {
		b.Helper()
		for _, r := range reqs { // every request is accepted, once
			if _, err := a.Authenticate(r); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := a.Authenticate(reqs[i]); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(reqs) {
				i = 0
			}
		}
	}
	resourceServer := func(b *testing.B, as *oauthtest.Server, entries int) *oauth.ResourceServer {
		b.Helper()
		rs, err := oauth.New(b.Context(), oauth.Config{Issuers: []string{as.Issuer()}, Resource: resource, Scopes: []string{scope}, CacheEntries: entries})
		if err != nil {
			b.Fatal(err)
		}
		return rs
	}

	b.Run("static", func(b *testing.B) {
		// A token as long as a 256-bit secret in base64url.
		const token = "h4K7qZ2vN9wXyT1sL0pR6mE3aB8cD5fG2jH4kM7nQ9s"
		run(b, auth.StaticTokens(token, nil), []*http.Request{request(token)})
	})
	b.Run("oauth-cached", func(b *testing.B) {
		as := oauthtest.New(b, oauthtest.Options{})
		run(b, resourceServer(b, as, 0), []*http.Request{request(as.Token(b, claims))})
	})
	b.Run("oauth-verify", func(b *testing.B) {
		// Minting a token (an RSA signature) costs far more than
		// verifying one, so the tokens are minted before the timer starts
		// and taken in turn; a cache of one entry has always just
		// forgotten the next token, so every request is a miss.
		as := oauthtest.New(b, oauthtest.Options{})
		reqs := make([]*http.Request, 32)
		for i := range reqs {
			reqs[i] = request(as.Token(b, claims)) // each with its own jti
		}
		run(b, resourceServer(b, as, 1), reqs)
	})
}
