package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

// browserEnv makes the test binary play the browser mcprel opens as
// $BROWSER, in the mode its value names:
//
//	approve      follow the authorization server's redirects to the
//	             loopback redirect and GET it, as a browser does
//	wrong-state  the same, with the redirect's state changed
//	twice        GET the redirect twice at once
//	slow         approve after 1.5s, as a person takes their time
const browserEnv = "MCPREL_TEST_BROWSER"

// playBrowser is the browser: it follows the authorization server's
// redirects from authURL, keeping its cookies (oidc-provider's automatic
// login and consent, or the fake's immediate 302), up to the redirect
// that leaves it, and GETs that as the mode says. What each GET of the
// redirect was answered goes to stderr, which mcprel passes on.
func playBrowser(mode, authURL string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if mode == "slow" {
		time.Sleep(1500 * time.Millisecond)
	}
	back, err := oidcprovider.Approve(ctx, authURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser:", err)
		return 1
	}
	if mode == "wrong-state" {
		q := back.Query()
		q.Set("state", "not-the-state")
		back.RawQuery = q.Encode()
	}
	get := func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, back.String(), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, "browser:", err)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		fmt.Fprintf(os.Stderr, "browser: %d %s\n", resp.StatusCode, body)
	}
	n := 1
	if mode == "twice" {
		n = 2
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(get)
	}
	wg.Wait()
	return 0
}

// signInEnv is the environment of an mcprel that signs in: its store in
// dir, and the test binary as its browser in mode ("" for none).
func signInEnv(t *testing.T, dir, mode string) []string {
	t.Helper()
	env := []string{"MCPREL_OAUTH_DIR=" + dir}
	if mode != "" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, "BROWSER="+strconv.Quote(exe), browserEnv+"="+mode)
	}
	return env
}

// mcprelEnv runs mcprel with args and env added to the test's, and
// returns stdout, stderr and the exit status.
func mcprelEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// storedFiles are the files of a sign-in store, by name, each checked to
// be 0600 (and the directory 0700); no temporary file may be left.
func storedFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the store's directory: %v %v, want 0700", fi.Mode(), err)
	}
	out := map[string]string{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(e.Name(), ".tmp") {
			t.Errorf("a temporary file was left in the store: %s", e.Name())
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", e.Name(), fi.Mode().Perm())
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// mcprel call against a server that wants OAuth signs in through the
// browser, keeps the tokens and reuses them on the next run without
// asking the authorization server again; logout forgets them, and the
// next run signs in again; login signs in ahead. In both eras, with the
// fake authorization server.
func TestCallSignsInAndReusesTheTokens(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Scopes: []string{"mcp:tools"}})
	endpoint, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer(), "--oauth-scopes", "mcp:tools")
	for _, era := range []string{"2026", "2025"} {
		t.Run(era, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "oauth")
			env := signInEnv(t, dir, "approve")
			authorizations := func() int { return len(as.AuthorizationRequests()) }
			before := authorizations()
			var outputs []string
			call := func(signsIn bool) {
				t.Helper()
				out, errs, code := mcprelEnv(t, env, "call", "--url", endpoint, "--era", era, "echo", "text=hi")
				outputs = append(outputs, out, errs)
				if code != 0 || !strings.Contains(out, `"text": "hi"`) {
					t.Fatalf("exit %d\n%s\n%s", code, out, errs)
				}
				if asked := strings.Contains(errs, "asks you to sign in"); asked != signsIn {
					t.Fatalf("signed in: %v, want %v:\n%s", asked, signsIn, errs)
				}
				if signsIn && !strings.Contains(errs, as.Issuer()+"/authorize?") {
					t.Fatalf("the authorization URL is not on stderr:\n%s", errs)
				}
			}

			call(true)
			if n := authorizations() - before; n != 1 {
				t.Fatalf("%d authorization requests, want 1", n)
			}
			files := storedFiles(t, dir)
			if len(files) != 1 {
				t.Fatalf("the store holds %d files, want 1: %v", len(files), files)
			}
			call(false)
			if n := authorizations() - before; n != 1 {
				t.Fatalf("the second run asked the authorization server again: %d authorization requests", n)
			}

			out, errs, code := mcprelEnv(t, env, "logout", endpoint)
			if code != 0 || !strings.Contains(out, "signed out of "+endpoint) {
				t.Fatalf("logout: exit %d\n%s\n%s", code, out, errs)
			}
			if files := storedFiles(t, dir); len(files) != 0 {
				t.Fatalf("logout left %v", files)
			}
			out, errs, code = mcprelEnv(t, env, "logout", endpoint)
			if code != 0 || !strings.Contains(out, "nothing was kept for "+endpoint) {
				t.Fatalf("logout again: exit %d\n%s\n%s", code, out, errs)
			}
			call(true)
			if n := authorizations() - before; n != 2 {
				t.Fatalf("after logout: %d authorization requests, want 2", n)
			}

			// login ahead of time, after a logout: the call that follows
			// does not sign in.
			mcprelEnv(t, env, "logout", endpoint)
			out, errs, code = mcprelEnv(t, env, "login", endpoint)
			outputs = append(outputs, out, errs)
			for _, want := range []string{"signed in to " + endpoint, "authorization server: " + as.Issuer(), "scopes:               mcp:tools",
				"subject:              user-1", "renewed without you: yes", "(dynamic)", "kept in:              " + dir} {
				if !strings.Contains(out, want) {
					t.Fatalf("login: exit %d, want %q in\n%s\n%s", code, want, out, errs)
				}
			}
			if code != 0 || authorizations()-before != 3 {
				t.Fatalf("login: exit %d after %d authorization requests", code, authorizations()-before)
			}
			call(false)
			out, _, code = mcprelEnv(t, env, "login", endpoint)
			if code != 0 || !strings.Contains(out, "already signed in to "+endpoint) || authorizations()-before != 3 {
				t.Fatalf("login again: exit %d\n%s", code, out)
			}
			noSecrets(t, "the output", strings.Join(outputs, "\n"), as.Issued()...)
		})
	}
}

// The same against a real authorization server, oidc-provider: dynamic
// registration of a native client with a loopback redirect URI, its
// automatic login and consent, the code exchanged with PKCE, the token
// accepted by mcprel serve; in both eras; then login, logout.
func TestCallSignsInWithOIDCProvider(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{})
	endpoint, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", p.Issuer, "--oauth-scopes", "mcp:tools")
	authorizations := func() int { return strings.Count(p.Log(), "GET /auth?") }
	for _, era := range []string{"2026", "2025"} {
		t.Run(era, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "oauth")
			env := signInEnv(t, dir, "approve")
			before := authorizations()
			for run, signsIn := range []bool{true, false} {
				out, errs, code := mcprelEnv(t, env, "call", "--url", endpoint, "--era", era, "echo", "text=hi")
				if code != 0 || !strings.Contains(out, `"text": "hi"`) || strings.Contains(errs, "asks you to sign in") != signsIn {
					t.Fatalf("run %d: exit %d\n%s\n%s", run+1, code, out, errs)
				}
				if n := authorizations() - before; n != 1 {
					t.Fatalf("run %d: %d authorization requests, want 1", run+1, n)
				}
			}
			storedFiles(t, dir)
			if _, _, code := mcprelEnv(t, env, "logout", endpoint); code != 0 {
				t.Fatalf("logout: exit %d", code)
			}
			out, errs, code := mcprelEnv(t, env, "login", endpoint)
			if code != 0 || !strings.Contains(out, "signed in to "+endpoint) || !strings.Contains(out, "subject:              "+p.Account) ||
				!strings.Contains(out, "authorization server: "+p.Issuer) {
				t.Fatalf("login: exit %d\n%s\n%s", code, out, errs)
			}
			if n := authorizations() - before; n != 2 {
				t.Fatalf("login: %d authorization requests, want 2", n)
			}
		})
	}
}

// A sign-in that fails says which step failed and why, exits 18, holds
// no token in its message and leaves no token stored: a redirect with a
// wrong state, with error=access_denied or with another issuer's iss,
// an authorization server that offers no PKCE or no registration, and
// a redirect that never comes.
func TestSignInFailuresNameTheStep(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    oauthtest.Options
		browser string
		args    []string
		want    []string
	}{
		{"a wrong state", oauthtest.Options{}, "wrong-state", nil,
			[]string{"oauth: authorization:", "state is not the request's"}},
		{"access denied", oauthtest.Options{DenyAuthorization: true}, "approve", nil,
			[]string{"oauth: authorization:", "access_denied (the user said no)"}},
		{"an authorization response from another issuer", oauthtest.Options{WrongIss: "http://127.0.0.1:1"}, "approve", nil,
			[]string{"oauth: issuer:", `iss "http://127.0.0.1:1" is not`}},
		{"no PKCE", oauthtest.Options{NoCodeChallengeMethods: true}, "approve", nil,
			[]string{"oauth: pkce:"}},
		{"no registration", oauthtest.Options{NoRegistration: true}, "approve", nil,
			[]string{"oauth: registration:", "no registration endpoint"}},
		{"no redirect in time", oauthtest.Options{}, "", []string{"--no-browser", "--sign-in-timeout", "1s"},
			[]string{"oauth: authorization: the sign-in did not complete: no redirect came to http://127.0.0.1:", "in time (--sign-in-timeout 1s)", "open this URL in a browser"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as := oauthtest.New(t, tc.opts)
			endpoint, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer())
			dir := filepath.Join(t.TempDir(), "oauth")
			start := time.Now()
			out, errs, code := mcprelEnv(t, signInEnv(t, dir, tc.browser), append([]string{"call", "--url", endpoint, "echo", "text=hi"}, tc.args...)...)
			if code != exitSignIn {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, exitSignIn, out, errs)
			}
			for _, want := range tc.want {
				if !strings.Contains(errs, want) {
					t.Fatalf("want %q in\n%s", want, errs)
				}
			}
			if !strings.Contains(errs, "mcprel: call: the server refused the request's credentials (HTTP 401), and signing in failed") {
				t.Fatalf("the message does not say the server refused and the sign-in failed:\n%s", errs)
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Fatalf("the failure took %v", took)
			}
			noSecrets(t, "the output", out+errs, as.Issued()...)
			for name, content := range storedFiles(t, dir) {
				if strings.Contains(content, "access_token") {
					t.Fatalf("%s holds a token after a failed sign-in:\n%s", name, content)
				}
			}
		})
	}
}

// mcprel probe and review --from-server sign in as call does, and reuse
// what call kept.
func TestProbeAndReviewSignIn(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	endpoint, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer())
	dir := filepath.Join(t.TempDir(), "oauth")
	env := signInEnv(t, dir, "approve")
	out, errs, code := mcprelEnv(t, env, "probe", "--url", endpoint, "--only", "1")
	if code != 0 || !strings.Contains(errs, "asks you to sign in") || len(as.AuthorizationRequests()) != 1 {
		t.Fatalf("probe: exit %d after %d authorization requests\n%s\n%s", code, len(as.AuthorizationRequests()), out, errs)
	}
	out, errs, code = mcprelEnv(t, env, "review", "--from-server", endpoint)
	if code != 0 && code != exitRefused || !strings.Contains(out, "Verdict") || strings.Contains(errs, "asks you to sign in") {
		t.Fatalf("review: exit %d\n%s\n%s", code, out, errs)
	}
	mcprelEnv(t, env, "logout", endpoint)
	out, errs, code = mcprelEnv(t, env, "review", "--from-server", endpoint, "--json")
	if code != 0 && code != exitRefused || !strings.Contains(out, `"verdict"`) || len(as.AuthorizationRequests()) != 2 {
		t.Fatalf("review after logout: exit %d\n%s\n%s", code, out, errs)
	}
	noSecrets(t, "the output", out+errs, as.Issued()...)
}

// The sign-in flags are refused where no sign-in can happen, and a bad
// value is a mistake in the command line.
func TestSignInUsageErrors(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, nil, 0o600)
	for _, args := range [][]string{
		{"call", "--stdio", "mcprel serve --stdio", "--no-browser", "echo"},
		{"call", "--url", "http://127.0.0.1:1/mcp", "--token", "t", "--oauth-client-id", "c", "echo"},
		{"call", "--url", "http://127.0.0.1:1/mcp", "--sign-in-timeout", "0s", "echo"},
		{"call", "--url", "http://127.0.0.1:1/mcp", "--oauth-client-secret-file", secret, "echo"},
		{"call", "--url", "http://127.0.0.1:1/mcp", "--oauth-client-id", "c", "--oauth-client-secret-file", secret, "echo"},
		{"probe", "--stdio", "mcprel serve --stdio", "--oauth-dir", "/tmp"},
		{"review", "--stdio", "mcprel serve --stdio", "--no-browser"},
		{"login"},
		{"login", "not-a-url"},
		{"logout", "http://127.0.0.1:1/mcp", "http://127.0.0.1:2/mcp"},
	} {
		_, errs, code := mcprelEnv(t, nil, args...)
		if code != exitUsage || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, want %d with one line:\n%s", args, code, exitUsage, errs)
		}
	}
}

// A sign-in after the refresh token is spent listens on the port its
// dynamic registration registered, and reuses the registration; when
// that port is taken it listens on another and registers anew, so that
// an authorization server that holds a client to its redirect URIs
// exactly still takes it.
func TestSignInAgainKeepsTheRedirectURI(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{TokenTTL: time.Second})
	endpoint, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer())
	env := signInEnv(t, filepath.Join(t.TempDir(), "oauth"), "approve")
	call := func() {
		t.Helper()
		time.Sleep(1100 * time.Millisecond) // the access token expires
		as.RevokeRefreshTokens()            // and cannot be refreshed
		out, errs, code := mcprelEnv(t, env, "call", "--url", endpoint, "echo", "text=hi")
		if code != 0 || !strings.Contains(errs, "asks you to sign in") {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
	}
	call()
	call()
	regs := as.Registrations()
	if len(regs) != 1 || len(as.AuthorizationRequests()) != 2 {
		t.Fatalf("%d registrations, %d authorization requests; want 1 and 2", len(regs), len(as.AuthorizationRequests()))
	}
	uris, _ := regs[0]["redirect_uris"].([]any)
	u, _ := url.Parse(fmt.Sprint(uris...))
	taken, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	call()
	if len(as.Registrations()) != 2 {
		t.Fatalf("with the port taken: %d registrations, want 2", len(as.Registrations()))
	}
}

// --max does not count the sign-in: a call with --max 1s succeeds after
// a sign-in that takes longer, and one whose browser GETs the redirect
// twice at once takes the first and succeeds.
func TestMaxDoesNotCountTheSignIn(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	endpoint, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer())
	for _, mode := range []string{"slow", "twice"} {
		t.Run(mode, func(t *testing.T) {
			env := signInEnv(t, filepath.Join(t.TempDir(), "oauth"), mode)
			start := time.Now()
			out, errs, code := mcprelEnv(t, env, "call", "--url", endpoint, "--max", "1s", "echo", "text=hi")
			if code != 0 || !strings.Contains(out, `"text": "hi"`) || !strings.Contains(errs, "asks you to sign in") {
				t.Fatalf("exit %d\n%s\n%s", code, out, errs)
			}
			if took := time.Since(start); mode == "slow" && took < 1500*time.Millisecond {
				t.Fatalf("the call took %v, less than its sign-in", took)
			}
		})
	}
}

// A --header without a colon is refused by call, probe and review alike,
// and the refusal never quotes it: it may be a credential.
func TestHeaderMistakeNotEchoed(t *testing.T) {
	for _, args := range [][]string{
		{"call", "--url", "http://127.0.0.1:1/mcp", "--header", "Authorization Bearer header-secret", "echo"},
		{"probe", "--url", "http://127.0.0.1:1/mcp", "--header", "Authorization Bearer header-secret"},
		{"review", "--from-server", "http://127.0.0.1:1/mcp", "--header", "Authorization Bearer header-secret"},
	} {
		cmd := exec.Command(binary, args...)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), `--header must be "Name: value"`) || strings.Contains(string(out), "header-secret") {
			t.Errorf("%s: exit %d\n%s", args[0], cmd.ProcessState.ExitCode(), out)
		}
	}
}
