package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/mcp"
)

// defaultSignInTimeout bounds a sign-in, the browser part included.
const defaultSignInTimeout = oauth.DefaultSignInTimeout

// preflightTimeout bounds the request that finds out whether a server
// wants a sign-in.
const preflightTimeout = 2 * client.DefaultProbeTimeout

// signInFlags are the flags of the commands that sign in to an HTTP
// server when it asks (call, probe, review --from-server) or ahead of
// time (login), and of logout.
type signInFlags struct {
	clientID   *string
	secretFile *string
	noBrowser  *bool
	timeout    *time.Duration
	dir        *string
}

// signInFlagNames are the flags register defines.
var signInFlagNames = []string{"oauth-client-id", "oauth-client-secret-file", "no-browser", "sign-in-timeout", "oauth-dir"}

func (f *signInFlags) register(fs *flag.FlagSet) {
	f.clientID = fs.String("oauth-client-id", "", "when an HTTP server asks you to sign in: the client id registered for mcprel with its authorization server\n(default: mcprel registers itself, where the authorization server allows it)")
	f.secretFile = fs.String("oauth-client-secret-file", "", "with --oauth-client-id: a file holding that client's secret (a confidential client)")
	f.noBrowser = fs.Bool("no-browser", false, "when signing in: print the authorization URL without opening a browser ($BROWSER, else the system's)")
	f.timeout = fs.Duration("sign-in-timeout", defaultSignInTimeout, "the longest a sign-in may take, the browser part included; --max does not count it")
	f.dir = fs.String("oauth-dir", "", "where sign-ins are kept, one 0600 file per server (default: $MCPREL_OAUTH_DIR, else mcprel/oauth in the user's configuration directory)")
}

// given reports whether any sign-in flag was set on the command line.
func (f *signInFlags) given(fs *flag.FlagSet) bool {
	set := setFlags(fs)
	for _, name := range signInFlagNames {
		if set[name] {
			return true
		}
	}
	return false
}

// dirOf is the store's directory: --oauth-dir, $MCPREL_OAUTH_DIR, or
// FileStore's default.
func (f *signInFlags) store() oauth.FileStore {
	return oauth.FileStore{Dir: firstNonEmpty(*f.dir, os.Getenv("MCPREL_OAUTH_DIR"))}
}

// storeDir names the store's directory for a message.
func (f *signInFlags) storeDir() string {
	if d := f.store().Dir; d != "" {
		return d
	}
	d, err := oauth.DefaultDir()
	if err != nil {
		return "the user's configuration directory"
	}
	return d
}

// signIn is the OAuth side of one HTTP server for a command: the client
// that holds its tokens, and the loopback receiver a sign-in redirects
// to.
type signIn struct {
	oc        *oauth.Client
	recv      *receiver
	endpoint  string
	timeout   time.Duration
	noBrowser bool
	stderr    io.Writer
}

// newSignIn checks the sign-in flags of command cmd and opens the
// receiver's port. Close releases it.
func newSignIn(cmd, endpoint string, f *signInFlags, stderr io.Writer) (*signIn, error) {
	if *f.timeout <= 0 {
		return nil, usagef("%s: --sign-in-timeout must be positive", cmd)
	}
	var secret string
	if *f.secretFile != "" {
		if *f.clientID == "" {
			return nil, usagef("%s: --oauth-client-secret-file goes with --oauth-client-id", cmd)
		}
		data, err := readSmallFile(*f.secretFile, maxSecretFile)
		if err != nil {
			return nil, usagef("%s: --oauth-client-secret-file: %v", cmd, err)
		}
		if secret = strings.TrimSpace(string(data)); secret == "" {
			return nil, usagef("%s: --oauth-client-secret-file %s is empty", cmd, *f.secretFile)
		}
	}
	recv, err := listenLoopback(registeredRedirect(endpoint, f.store()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	s := &signIn{recv: recv, endpoint: endpoint, timeout: *f.timeout, noBrowser: *f.noBrowser, stderr: stderr}
	s.oc, err = oauth.New(endpoint, oauth.Options{
		ClientID:      *f.clientID,
		ClientSecret:  secret,
		RedirectURL:   recv.url,
		Authorize:     s.authorize,
		Store:         f.store(),
		SignInTimeout: *f.timeout,
	})
	if err != nil {
		recv.close()
		return nil, usagef("%s: %v", cmd, err)
	}
	return s, nil
}

func (s *signIn) Close() { s.recv.close() }

// authorize is the interactive step: it says where to sign in, opens the
// browser unless --no-browser, and waits for the redirect.
func (s *signIn) authorize(ctx context.Context, authorizationURL string) (string, error) {
	how := "open this URL in a browser"
	if !s.noBrowser {
		how = "your browser should open this URL; if it does not, open it yourself"
	}
	fmt.Fprintf(s.stderr, "mcprel: %s asks you to sign in: %s, and sign in (waiting up to %v):\n  %s\n", s.endpoint, how, s.timeout, authorizationURL)
	if !s.noBrowser {
		if name, err := openBrowser(authorizationURL, s.stderr); err != nil {
			fmt.Fprintf(s.stderr, "mcprel: could not open a browser (%s: %v): open the URL above yourself\n", name, err)
		}
	}
	u, err := s.recv.wait(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w (--sign-in-timeout %v)", err, s.timeout)
	}
	return u, err
}

// first asks the server once, before any clock of the command's runs,
// whether it wants credentials it does not have — and if so signs in,
// under --sign-in-timeout and no other deadline, and stores the tokens.
// A sign-in that fails is a *client.AuthorizationError saying which step
// failed. It returns true when the server asked and the sign-in
// succeeded. Any other answer, a failure to connect included, is left to
// the connection that follows, which reports it as it does without a
// sign-in.
//
// The request is harmless whatever the server: a 2026-07-28
// server/discover, or for a 2025 connection (legacy) a ping outside any
// session.
func (s *signIn) first(ctx context.Context, header http.Header, legacy bool) (bool, error) {
	method, version := mcp.MethodDiscover, mcp.Version20260728
	if legacy {
		method, version = mcp.MethodPing, mcp.LatestLegacyVersion
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":%q}`, method)
	pctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodPost, s.endpoint, strings.NewReader(body))
	if err != nil {
		return false, nil
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, version)
	if !legacy {
		req.Header.Set(mcp.HeaderMethod, method)
	}
	if err := s.oc.Authorize(req); err != nil {
		return false, &client.AuthorizationError{Err: err}
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return false, nil
	}
	defer func() {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return false, nil
	}
	sctx, stop := context.WithTimeout(ctx, s.timeout)
	defer stop()
	retry, err := s.oc.Refused(sctx, req, resp)
	switch {
	case err != nil:
		return false, &client.AuthorizationError{Status: resp.StatusCode, Err: err}
	case !retry && resp.StatusCode == http.StatusUnauthorized:
		return false, &client.AuthorizationError{Status: resp.StatusCode}
	}
	return retry, nil
}

// bearer is the access token held, after first: for a command whose
// requests do not go through package client (probe).
func (s *signIn) bearer(ctx context.Context) string {
	st, err := s.oc.State(ctx)
	if err != nil || st == nil {
		return ""
	}
	return st.AccessToken
}

// usesSignIn reports whether a command talking to endpoint signs in
// when asked: over HTTP, unless the command line gives credentials of
// its own (--token, MCPREL_TOKEN, an Authorization --header), which are
// sent as they are.
func usesSignIn(endpoint string, header http.Header) bool {
	return endpoint != "" && header.Get("Authorization") == ""
}

// signInError is how a command that could not sign in ends: exit
// status 18 for call, and its message.
func signInError(cmd string, err error) error {
	return &exitError{exitSignIn, cmd + ": " + strings.TrimPrefix(err.Error(), "client: ")}
}

// loginCmd is "mcprel login URL": a sign-in ahead of time, so that the
// commands that follow find the tokens stored.
func loginCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("login", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var si signInFlags
	si.register(fs)
	var headers listFlag
	fs.Var(&headers, "header", `an HTTP header to send, "Name: value" (repeatable)`)
	setUsage(fs, "usage: mcprel login URL [flags]",
		`Signs in to the MCP server at URL, an HTTP endpoint, with OAuth 2.1 as
the MCP authorization spec says, and keeps the tokens for the commands
that follow (call, probe, review --from-server), which refresh them.
It prints the authorization URL on stderr and opens it in a browser
($BROWSER, else the system's; --no-browser only prints it), then waits
for the redirect to 127.0.0.1. It prints what was granted, never a token.
Exit status: 0 signed in (or no sign-in needed), 18 the sign-in failed
(the message names the step), 2 a mistake in the command line.`)
	endpoint, err := oneURL(fs, args)
	if err != nil {
		return err
	}
	header, err := parseHeaders("login", headers)
	if err != nil {
		return err
	}
	s, err := newSignIn("login", endpoint, &si, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	signedIn, err := s.first(ctx, header, false)
	if err != nil {
		return signInError("login", err)
	}
	st, err := s.oc.State(ctx)
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	switch {
	case st == nil || st.AccessToken == "":
		fmt.Fprintf(stdout, "%s asked for no credentials: nothing to sign in to\n", endpoint)
		return nil
	case signedIn:
		fmt.Fprintf(stdout, "signed in to %s\n", endpoint)
	default:
		fmt.Fprintf(stdout, "already signed in to %s (mcprel logout %s forgets it)\n", endpoint, endpoint)
	}
	describeGrant(stdout, st, si.storeDir())
	return nil
}

// describeGrant prints what a sign-in holds, without a token or secret.
func describeGrant(w io.Writer, st *oauth.State, dir string) {
	fmt.Fprintf(w, "  authorization server: %s\n", st.Issuer)
	if sub := tokenSubject(st.AccessToken); sub != "" {
		fmt.Fprintf(w, "  subject:              %s\n", sub)
	}
	scopes := "(none named)"
	if len(st.Scopes) > 0 {
		scopes = strings.Join(st.Scopes, " ")
	}
	fmt.Fprintf(w, "  scopes:               %s\n", scopes)
	expiry := "not said"
	if !st.Expiry.IsZero() {
		expiry = st.Expiry.Local().Format(time.RFC3339)
	}
	renew := "no: a sign-in follows its expiry"
	if st.RefreshToken != "" {
		renew = "yes, by refresh token"
	}
	fmt.Fprintf(w, "  access token expires: %s (renewed without you: %s)\n", expiry, renew)
	if reg, ok := st.Registrations[st.Issuer]; ok {
		fmt.Fprintf(w, "  client:               %s (%s)\n", reg.ClientID, reg.Source)
	}
	fmt.Fprintf(w, "  kept in:              %s\n", dir)
}

// tokenSubject is the sub of a JWT access token, shown as who signed in;
// "" for an opaque token. Nothing is verified: it is only shown.
func tokenSubject(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	return printableText(claims.Sub, 200)
}

// logoutCmd is "mcprel logout URL": it forgets the server's tokens and
// the client registrations made for it.
func logoutCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("logout", flag.ContinueOnError)
	fs.SetOutput(stdout)
	dir := fs.String("oauth-dir", "", "where sign-ins are kept (default: $MCPREL_OAUTH_DIR, else mcprel/oauth in the user's configuration directory)")
	setUsage(fs, "usage: mcprel logout URL [--oauth-dir DIR]",
		`Forgets the tokens "mcprel login" or a command's sign-in kept for the
server at URL, and the client registrations made for it; the next
command that talks to it signs in again. Nothing is sent to the server
or its authorization server. Exit status: 0 forgotten (or nothing was
kept), 1 the file could not be removed, 2 a mistake in the command line.`)
	endpoint, err := oneURL(fs, args)
	if err != nil {
		return err
	}
	si := signInFlags{dir: dir}
	key, err := stateKey(endpoint)
	if err != nil {
		return usagef("logout: %v", err)
	}
	store := si.store()
	st, lerr := store.Load(ctx, key)
	if lerr != nil {
		// A file that does not parse is removed all the same.
		fmt.Fprintf(stderr, "mcprel logout: %v; removing it\n", lerr)
	}
	if err := store.Delete(ctx, key); err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	if st == nil && lerr == nil {
		fmt.Fprintf(stdout, "nothing was kept for %s in %s: not signed in\n", endpoint, si.storeDir())
		return nil
	}
	fmt.Fprintf(stdout, "signed out of %s: its tokens and registrations are forgotten\n", endpoint)
	return nil
}

// stateKey is the key the state of the server at endpoint is kept under
// (its resource identifier, as an oauth.Client names it).
func stateKey(endpoint string) (string, error) {
	oc, err := oauth.New(endpoint, oauth.Options{RedirectURL: "http://127.0.0.1/callback",
		Authorize: func(context.Context, string) (string, error) { return "", errors.New("signs nobody in") }})
	if err != nil {
		return "", err
	}
	return oc.Resource(), nil
}

// registeredRedirect is the loopback redirect URI a dynamic registration
// kept for endpoint registered, "" when there is none: a sign-in that
// listens there again needs no new registration.
func registeredRedirect(endpoint string, store oauth.Store) string {
	key, err := stateKey(endpoint)
	if err != nil {
		return ""
	}
	st, err := store.Load(context.Background(), key)
	if err != nil || st == nil {
		return ""
	}
	if reg := st.Registrations[st.Issuer]; reg.Source == oauth.SourceDynamic {
		return reg.RedirectURI
	}
	return ""
}

// oneURL parses a command that takes one endpoint URL and flags.
func oneURL(fs *flag.FlagSet, args []string) (string, error) {
	positional, err := parseArgs(fs, args, "")
	if err != nil {
		return "", err
	}
	if len(positional) != 1 {
		return "", usagef("%s: give the server's URL, one (http://127.0.0.1:8080/mcp)", fs.Name())
	}
	if err := checkEndpoint(fs.Name(), "URL", positional[0]); err != nil {
		return "", err
	}
	return positional[0], nil
}

// parseHeaders turns --header values into a header.
func parseHeaders(cmd string, headers []string) (http.Header, error) {
	h := http.Header{}
	for _, v := range headers {
		name, value, ok := strings.Cut(v, ":")
		if !ok || strings.TrimSpace(name) == "" {
			// Never the value: it may be a credential.
			return nil, usagef("%s: --header must be \"Name: value\" (one has no name, or no colon)", cmd)
		}
		h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	return h, nil
}

// errNoSignIn is a sign-in flag on a command that cannot use it.
var errNoSignIn = errors.New("the sign-in flags apply to an HTTP server (--url, --from-server) without --token or an Authorization --header")
