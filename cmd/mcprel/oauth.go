package main

import (
	"cmp"
	"flag"
	"os"
	"strings"

	"github.com/mcprel/mcprel/auth/oauth"
)

// oauthFlags make an HTTP listener of "serve" or "gateway" an OAuth 2.1
// protected resource (package auth/oauth).
type oauthFlags struct {
	issuers         listFlag
	publicURL       *string
	audience        *string
	scopes          *string
	tenantClaim     *string
	introspection   *string
	introspectionID *string
	secretFile      *string
}

func (f *oauthFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.issuers, "oauth-issuer", "with --http: accept OAuth access tokens issued by this authorization server (its issuer URL; repeatable): clients that follow the MCP authorization spec sign in with it")
	f.publicURL = fs.String("public-url", "", "with --oauth-issuer: the URL clients reach the endpoint at (behind a proxy it differs from --http); tokens must be issued for it (default: the endpoint URL printed at start)")
	f.audience = fs.String("oauth-audience", "", "with --oauth-issuer: the audience tokens must carry, when the authorization server names this resource otherwise than --public-url")
	f.scopes = fs.String("oauth-scopes", "", "with --oauth-issuer: scopes every request's token must hold, comma-separated (e.g. mcp:tools)")
	f.tenantClaim = fs.String("oauth-tenant-claim", oauth.DefaultTenantClaim, "with --oauth-issuer: the token claim naming the caller's tenant (its keys, tasks, limits and sessions)")
	f.introspection = fs.String("oauth-introspection", "", "with --oauth-issuer: check tokens at this RFC 7662 introspection endpoint instead of as JWTs (sees revocations); credentials from --oauth-introspection-client-id and MCPREL_OAUTH_INTROSPECTION_SECRET or --oauth-introspection-secret-file")
	f.introspectionID = fs.String("oauth-introspection-client-id", "", "with --oauth-introspection: the client id this server authenticates to the endpoint with (or set MCPREL_OAUTH_INTROSPECTION_CLIENT_ID)")
	f.secretFile = fs.String("oauth-introspection-secret-file", "", "with --oauth-introspection: a file holding the client secret (default: MCPREL_OAUTH_INTROSPECTION_SECRET)")
}

// set reports whether any OAuth flag was given.
func (f *oauthFlags) set(fs *flag.FlagSet) bool {
	given := setFlags(fs)
	for _, name := range []string{"oauth-issuer", "public-url", "oauth-audience", "oauth-scopes", "oauth-tenant-claim", "oauth-introspection", "oauth-introspection-client-id", "oauth-introspection-secret-file"} {
		if given[name] {
			return true
		}
	}
	return false
}

// config checks the flags and returns the resource server's
// configuration; nil when no OAuth flag was given.
func (f *oauthFlags) config(cmd string, fs *flag.FlagSet, httpAddr, authToken string, tokens []string) (*oauth.Config, error) {
	if !f.set(fs) {
		return nil, nil
	}
	switch {
	case len(f.issuers) == 0:
		return nil, usagef("%s: the OAuth flags need --oauth-issuer: the authorization server whose tokens are accepted", cmd)
	case httpAddr == "":
		return nil, usagef("%s: --oauth-issuer needs --http: over stdio, credentials come from the environment", cmd)
	case cmp.Or(authToken, os.Getenv("MCPREL_AUTH_TOKEN")) != "" || len(tokens) > 0:
		return nil, usagef("%s: choose --oauth-issuer or static tokens (--auth-token, MCPREL_AUTH_TOKEN, --token), not both", cmd)
	}
	cfg := &oauth.Config{
		Issuers:     f.issuers,
		Resource:    *f.publicURL,
		Audience:    *f.audience,
		TenantClaim: *f.tenantClaim,
	}
	for s := range strings.SplitSeq(*f.scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Scopes = append(cfg.Scopes, s)
		}
	}
	if *f.tenantClaim == "" {
		return nil, usagef("%s: --oauth-tenant-claim must name a claim, such as sub", cmd)
	}
	if *f.introspection != "" {
		in := &oauth.Introspection{URL: *f.introspection,
			ClientID: cmp.Or(*f.introspectionID, os.Getenv("MCPREL_OAUTH_INTROSPECTION_CLIENT_ID")),
		}
		in.ClientSecret = os.Getenv("MCPREL_OAUTH_INTROSPECTION_SECRET")
		if *f.secretFile != "" {
			data, err := readSmallFile(*f.secretFile, maxSecretFile)
			if err != nil {
				return nil, usagef("%s: --oauth-introspection-secret-file: %v", cmd, err)
			}
			in.ClientSecret = strings.TrimSpace(string(data))
		}
		if in.ClientID == "" || in.ClientSecret == "" {
			return nil, usagef("%s: --oauth-introspection needs this server's client id (--oauth-introspection-client-id) and secret (MCPREL_OAUTH_INTROSPECTION_SECRET or --oauth-introspection-secret-file)", cmd)
		}
		cfg.Introspection = in
	} else if *f.introspectionID != "" || *f.secretFile != "" {
		return nil, usagef("%s: --oauth-introspection-client-id and --oauth-introspection-secret-file need --oauth-introspection", cmd)
	}
	if err := cfg.Check(); err != nil {
		return nil, usagef("%s: %s", cmd, flagWords(err))
	}
	return cfg, nil
}

// flagWords says what a Config error says in the flags' names.
func flagWords(err error) string {
	return strings.NewReplacer(
		"oauth: ", "",
		"Config.Issuers", "--oauth-issuer",
		"Config.Resource", "--public-url",
		"Config.Introspection.URL", "--oauth-introspection",
		"Config.Introspection", "--oauth-introspection",
		"Config.Algorithms", "algorithms",
	).Replace(err.Error())
}
