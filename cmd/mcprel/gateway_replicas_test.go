package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/oauthstore"
	"github.com/mcprel/mcprel/store"
)

// replicaKey is the key of the replicas' stored authorization.
const replicaKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

// storedLogin reads, as a gateway would, the authorization kept in the
// database dsn for the upstream at resource.
func storedLogin(t *testing.T, dsn, resource string) *oauth.State {
	t.Helper()
	ctx := t.Context()
	db, err := store.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key, err := oauthstore.ParseKey(replicaKey)
	if err != nil {
		t.Fatal(err)
	}
	s, err := oauthstore.New(ctx, db, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx, resource)
	if err != nil || st == nil || st.AccessToken == "" {
		t.Fatalf("no authorization stored for %s: %v", resource, err)
	}
	return st
}

// postCall is oauthPost for a goroutine: a 2026-07-28 tools/call of echo,
// its failure returned rather than fatal.
func postCall(endpoint string, id int) (string, error) {
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(modernCall(id, "echo", fmt.Sprintf(`{"text":"call %d"}`, id))))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "echo")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && (resp.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf(`"text":"call %d"`, id)) || strings.Contains(string(b), `"isError":true`)) {
		err = fmt.Errorf("HTTP %d %s", resp.StatusCode, b)
	}
	return string(b), err
}

// refreshes counts the refresh requests the authorization server got.
func refreshes(as *oauthtest.Server) int {
	n := 0
	for _, r := range as.TokenRequests() {
		if r.Form.Get("grant_type") == "refresh_token" {
			n++
		}
	}
	return n
}

// Two gateway processes, replicas sharing one database, call an upstream
// with the one authorization an operator granted ("mcprel gateway
// login"). When its access token needs renewing — it expires within the
// minute (stale), or the upstream refuses it (expired there) — and both
// get a call at once, exactly one refresh request reaches the
// authorization server: the replica holding the lease spends the
// refresh token (which rotates: a second refresh with it would fail),
// the other uses the token still good meanwhile, or the one the first
// saved; both calls succeed. On PostgreSQL (MCPREL_TEST_POSTGRES_URL,
// skipped without) and on one SQLite file.
func TestGatewayReplicasRefreshOnce(t *testing.T) {
	for _, db := range []struct {
		name string
		dsn  func(testing.TB) string
	}{{"sqlite", storetest.SQLite}, {"postgres", storetest.Postgres}} {
		// Access tokens of 64 s are renewed once within a minute of
		// expiry: stale 4 s after they are issued, and fresh again as
		// long once renewed, far longer than both calls take.
		t.Run(db.name+"/stale", func(t *testing.T) {
			testReplicasRefreshOnce(t, db.dsn(t), 64*time.Second, false)
		})
		t.Run(db.name+"/refused", func(t *testing.T) {
			testReplicasRefreshOnce(t, db.dsn(t), time.Hour, true)
		})
	}
}

func testReplicasRefreshOnce(t *testing.T, dsn string, ttl time.Duration, refuse bool) {
	as := oauthtest.New(t, oauthtest.Options{TokenTTL: ttl})
	guard := protectedUpstream(t, as)
	key := []string{gatewayKeyEnv + "=" + replicaKey}
	out := gatewayLogin(t, as, key, "demo", guard.public, dsn)
	var gws [2]string
	var logs [2]*logBuffer
	for i := range gws {
		gws[i], logs[i] = startLogged(t, key, "gateway", "--http", "127.0.0.1:0", "--upstream", "demo="+guard.public,
			"--upstream-oauth-login", "demo", "--db", dsn)
	}
	// Both serve with the stored authorization.
	for i, gw := range gws {
		if body, err := postCall(gw, i+1); err != nil {
			t.Fatalf("replica %d: %v (%s)\n%s", i+1, err, body, logs[i])
		}
	}

	before := refreshes(as)
	if refuse {
		guard.rejectSeen() // the access token expired at the upstream
	} else {
		// Wait until the stored token is stale: what the database says,
		// bounded by the token's lifetime. The count is taken first, so
		// that a renewal by either replica meanwhile is counted.
		for {
			st := storedLogin(t, dsn, guard.public)
			stale := st.Expiry.Add(-time.Minute)
			if !time.Now().Before(stale) {
				break
			}
			if time.Until(stale) > ttl {
				t.Fatalf("the stored access token is fresh until %v, past its lifetime", stale)
			}
			time.Sleep(time.Until(stale))
			before = refreshes(as)
		}
	}
	var wg sync.WaitGroup
	var errs [2]error
	var bodies [2]string
	for i, gw := range gws {
		wg.Go(func() { bodies[i], errs[i] = postCall(gw, 10+i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d, once the token needed renewing: %v\n%s", i+1, err, logs[i])
		}
	}
	if n := refreshes(as) - before; n != 1 {
		t.Errorf("%d refresh requests reached the authorization server; want exactly 1", n)
	}
	st := storedLogin(t, dsn, guard.public)
	if reqs := as.TokenRequests(); reqs[len(reqs)-1].Form.Get("grant_type") != "refresh_token" {
		t.Errorf("the last token request was %v, not the refresh", reqs[len(reqs)-1].Form)
	}
	if !strings.HasPrefix(st.RefreshToken, "rt-") || !strings.Contains(strings.Join(as.Issued(), " "), st.RefreshToken) {
		t.Errorf("the stored refresh token is not one the authorization server issued")
	}
	secrets := append(as.Issued(), replicaKey)
	noSecrets(t, "an answer", strings.Join(bodies[:], "\n"), secrets...)
	noSecrets(t, "login's output", out, secrets...)
	for i := range logs {
		noSecrets(t, fmt.Sprintf("replica %d's log", i+1), logs[i].String(), secrets...)
	}
}
