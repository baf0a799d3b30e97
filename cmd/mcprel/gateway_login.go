package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/oauthstore"
	"github.com/mcprel/mcprel/store"
)

// gatewayKeyEnv names the environment variable holding the key that seals
// the upstream authorizations the gateway keeps in its database.
const gatewayKeyEnv = "MCPREL_GATEWAY_KEY"

// gatewayLoginCmd is "mcprel gateway login NAME": an operator authorizes
// the gateway to call HTTP upstream NAME, once, in a browser (the
// authorization code grant with PKCE, through a redirect to a loopback
// listener), and the authorization — refresh token and all — is kept in
// the gateway's database, sealed with the gateway's key, for every
// replica started with --upstream-oauth-login NAME to use and refresh.
func gatewayLoginCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gateway login", flag.ContinueOnError)
	fs.SetOutput(stdout)
	setUsage(fs, "usage: mcprel gateway login NAME --upstream NAME=URL [--db DSN] [--key-file FILE] [flags]",
		`Authorizes the gateway to call HTTP upstream NAME with an operator's
authorization: prints the authorization server's URL (and opens it with
$BROWSER unless --no-browser), waits for the redirect on a loopback
listener, and keeps the tokens in the gateway's database, encrypted with
the key in $`+gatewayKeyEnv+` or --key-file. A gateway started with
--upstream-oauth-login NAME then uses and refreshes them. Give it the
gateway's own --upstream, --db and client flags. Exit status: 0 once
stored, 1 a failure, 2 a mistake in the command line.`)
	var upstreams listFlag
	fs.Var(&upstreams, "upstream", "NAME=URL: the upstream, as the gateway is given it (repeatable; others are ignored)")
	var upOAuth upstreamOAuthFlags
	upOAuth.register(fs)
	dsn := fs.String("db", "", "the gateway's database: a SQLite file path, or a postgres:// URL; default $MCPREL_DB, else "+defaultDB)
	noBrowser := fs.Bool("no-browser", false, "print the authorization URL only; do not run $BROWSER")
	timeout := fs.Duration("timeout", oauth.DefaultSignInTimeout, "how long to wait for the authorization in the browser")
	name := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" || fs.NArg() > 1 || (fs.NArg() == 1 && fs.Arg(0) != name) {
		return usagef("gateway login: name one upstream: mcprel gateway login NAME --upstream NAME=URL")
	}
	if *timeout <= 0 {
		return usagef("gateway login: --timeout must be positive")
	}
	ups, err := parseUpstreams(upstreams)
	if err != nil {
		return err
	}
	byName := map[string]*gateway.Upstream{}
	for i := range ups {
		byName[ups[i].Name] = &ups[i]
	}
	u := byName[name]
	switch {
	case u == nil:
		return usagef("gateway login: no --upstream defines %q", name)
	case u.Transport == gateway.Stdio:
		return usagef("gateway login: upstream %q is a stdio server; OAuth is for HTTP upstreams", name)
	}
	// Only NAME's flags count: the gateway's others may be given too.
	mine := func(l listFlag) listFlag {
		var out listFlag
		for _, v := range l {
			if strings.HasPrefix(v, name+"=") {
				out = append(out, v)
			}
		}
		return out
	}
	upOAuth.clientID, upOAuth.secretFile, upOAuth.login = mine(upOAuth.clientID), mine(upOAuth.secretFile), listFlag{name}
	oauthUps, err := upOAuth.parse(map[string]*gateway.Upstream{name: u})
	if err != nil {
		return err
	}
	o := oauthUps[name]
	tokens, closeTokens, err := openTokenStore(ctx, cmp.Or(*dsn, os.Getenv("MCPREL_DB"), defaultDB), *upOAuth.keyFile, "gateway login")
	if err != nil {
		return err
	}
	defer closeTokens()

	// The same loopback receiver and browser opener as mcprel login.
	recv, err := listenLoopback("")
	if err != nil {
		return fmt.Errorf("gateway login: %w", err)
	}
	defer recv.close()

	opts := storedOAuthOptions(o)
	opts.Store = &oauth.MemoryStore{} // a new authorization, stored whole once it works
	opts.RedirectURL = recv.url
	opts.SignInTimeout = *timeout
	opts.Authorize = func(ctx context.Context, authURL string) (string, error) {
		fmt.Fprintf(stderr, "Open this URL to authorize the gateway to call upstream %q (waiting up to %v):\n\n  %s\n\n", name, *timeout, authURL)
		if !*noBrowser {
			if browser, err := openBrowser(authURL, stderr); err != nil {
				fmt.Fprintf(stderr, "mcprel: could not open a browser (%s: %v): open the URL above yourself\n", browser, err)
			}
		}
		u, err := recv.wait(ctx)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (--timeout %v)", err, *timeout)
		}
		return u, err
	}
	oc, err := oauth.New(u.URL, opts)
	if err != nil {
		return usagef("gateway login: %v", err)
	}
	// The upstream's 401 leads to its authorization server; the call
	// that follows the sign-in proves the tokens work there.
	c, err := client.DialHTTP(ctx, u.URL, &client.Options{Authorizer: oc, Header: u.Header})
	if err != nil {
		var ae *client.AuthorizationError
		if errors.As(err, &ae) {
			return fmt.Errorf("gateway login: upstream %q: %w", name, err)
		}
		return fmt.Errorf("gateway login: upstream %q could not be reached: %w", name, err)
	}
	c.Close()
	st, err := oc.State(ctx)
	if err != nil {
		return fmt.Errorf("gateway login: %w", err)
	}
	if st == nil || st.AccessToken == "" {
		return fmt.Errorf("gateway login: upstream %q asked for no authorization: it needs no --upstream-oauth-login", name)
	}
	if err := tokens.Put(ctx, oc.Resource(), st); err != nil {
		return fmt.Errorf("gateway login: storing the authorization: %w", err)
	}
	refresh := "and a refresh token: the gateway renews it itself"
	if st.RefreshToken == "" {
		refresh = "but no refresh token: the gateway needs another login when it expires"
	}
	fmt.Fprintf(stdout, "authorized: upstream %q (issuer %s), %s; kept encrypted in the database\n", name, st.Issuer, refresh)
	return nil
}

// storedOAuthOptions are the client/oauth options of an upstream whose
// authorization an operator granted: pre-registered credentials when
// its flags give them, else the registration kept with the tokens.
func storedOAuthOptions(o *upstreamOAuth) oauth.Options {
	return oauth.Options{GrantType: oauth.GrantAuthorizationCode, ClientID: o.clientID, ClientSecret: o.secret}
}

// openTokenStore opens the store of upstream authorizations in the
// database dsn, with the key from keyFile or $MCPREL_GATEWAY_KEY: none is
// kept without one.
// readGatewayKey reads the key that seals upstream authorizations, from
// keyFile or $MCPREL_GATEWAY_KEY.
func readGatewayKey(keyFile, cmd string) ([]byte, error) {
	raw := os.Getenv(gatewayKeyEnv)
	from := "$" + gatewayKeyEnv
	if keyFile != "" {
		data, err := readSmallFile(keyFile, maxSecretFile)
		if err != nil {
			return nil, usagef("%s: --key-file: %v", cmd, err)
		}
		raw, from = string(data), keyFile
	}
	if strings.TrimSpace(raw) == "" {
		return nil, usagef("%s: upstream authorizations are kept encrypted: give the key in $%s or --key-file (e.g. head -c 32 /dev/urandom | base64)", cmd, gatewayKeyEnv)
	}
	key, err := oauthstore.ParseKey(raw)
	if err != nil {
		return nil, usagef("%s: the key in %s: %s", cmd, from, strings.TrimPrefix(err.Error(), "oauthstore: "))
	}
	return key, nil
}

func openTokenStore(ctx context.Context, dsn, keyFile, cmd string) (*oauthstore.Store, func(), error) {
	key, err := readGatewayKey(keyFile, cmd)
	if err != nil {
		return nil, nil, err
	}
	if err := store.CheckDSN(dsn); err != nil {
		return nil, nil, usagef("%s: --db: %v", cmd, err)
	}
	db, err := store.Open(ctx, dsn, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	s, err := oauthstore.New(ctx, db, key, nil)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return s, func() { db.Close() }, nil
}
