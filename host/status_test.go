package host_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/status"
	"github.com/mcprel/mcprel/store"
)

const metricsToken = "m3trics-t0ken"

// leaveUnknown records the outcome of tenant's call of tool with key as
// unknown, as a gateway whose forward lost its answer does.
func leaveUnknown(t *testing.T, l *ledger.Ledger, tenant, tool, key string) {
	t.Helper()
	ctx := context.Background()
	c, _, err := l.ClaimOnce(ctx, ledger.Op{Tenant: tenant, Tool: tool, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unknown(ctx, "the connection broke with the request sent"); err != nil {
		t.Fatal(err)
	}
}

// get GETs url with the header given (name, value pairs).
func get(t *testing.T, url string, header ...string) fetched {
	t.Helper()
	return getHost(t, url, "", header...)
}

// getHost GETs url naming host in its Host header (empty: the URL's).
func getHost(t *testing.T, url, host string, header ...string) fetched {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fetched{code: resp.StatusCode, challenge: resp.Header.Get("WWW-Authenticate"), body: string(b),
		challengeAll: strings.Join(resp.Header.Values("WWW-Authenticate"), ", ")}
}

// The status page is served on the metrics' own listener, behind the
// metrics' token exactly as the metrics are: refused without it or with
// the endpoint's token, and, like the metrics there, with no Host or
// Origin check; its JSON carries the same data.
func TestStatusOnTheMetricsListener(t *testing.T) {
	opts := options(t, storetest.SQLite(t), &steps{})
	opts.Addr = "127.0.0.1:0"
	opts.HTTP.AuthToken = token
	opts.Metrics.Addr = "127.0.0.1:0"
	opts.Metrics.Token = metricsToken
	opts.Replica = "replica-7"
	rt, err := host.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := running(t, rt)
	defer stop()
	leaveUnknown(t, rt.Ledger(), "acme", "send_email", "m-1")

	page := rt.StatusURL()
	if page != strings.TrimSuffix(rt.MetricsURL(), "/metrics")+"/status" {
		t.Fatalf("StatusURL %q beside %q", page, rt.MetricsURL())
	}
	for _, u := range []string{page, page + ".json"} {
		if got := fetch(t, u, ""); got.code != http.StatusUnauthorized || got.challenge == "" {
			t.Errorf("%s without credentials: %d %q, want 401 with a challenge", u, got.code, got.challenge)
		}
		if got := fetch(t, u, token); got.code != http.StatusUnauthorized {
			t.Errorf("%s with the endpoint's token: %d, want 401", u, got.code)
		}
		// A page a browser shows: another site's Origin, or a name
		// that is not this listener's (DNS rebinding), is refused,
		// though the metrics beside it check neither for scrapers.
		if got := get(t, u, "Authorization", "Bearer "+metricsToken, "Origin", "https://evil.example"); got.code != http.StatusForbidden || !strings.Contains(got.body, `origin "https://evil.example" is not allowed`) {
			t.Errorf("%s from a foreign origin: %d %s, want 403", u, got.code, got.body)
		}
		own := "http://" + strings.TrimPrefix(strings.TrimSuffix(rt.MetricsURL(), "/metrics"), "http://")
		if got := get(t, u, "Authorization", "Bearer "+metricsToken, "Origin", own); got.code != http.StatusOK {
			t.Errorf("%s from its own origin: %d, want 200", u, got.code)
		}
		if got := getHost(t, u, "rebound.example:80", "Authorization", "Bearer "+metricsToken); got.code != http.StatusForbidden {
			t.Errorf("%s named rebound.example: %d, want 403", u, got.code)
		}
		if got := getHost(t, u, "localhost", "Authorization", "Bearer "+metricsToken); got.code != http.StatusOK {
			t.Errorf("%s named localhost: %d, want 200", u, got.code)
		}
		if metrics := getHost(t, rt.MetricsURL(), "rebound.example:80", "Authorization", "Bearer "+metricsToken); metrics.code != http.StatusOK {
			t.Errorf("the metrics, scraped by any name: %d, want 200", metrics.code)
		}
		// A browser is asked for the token (Basic, the password), and
		// sends it so.
		if got := get(t, u); !strings.Contains(got.challengeAll, `Basic realm="mcprel status"`) {
			t.Errorf("%s without credentials asks no browser for them: %q", u, got.challengeAll)
		}
		if got := get(t, u, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("operator:"+metricsToken))); got.code != http.StatusOK {
			t.Errorf("%s with the token as Basic's password: %d", u, got.code)
		}
		if got := get(t, u, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("operator:wrong"))); got.code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong Basic password: %d", u, got.code)
		}
	}
	got := fetch(t, page, metricsToken)
	if got.code != http.StatusOK {
		t.Fatalf("the page: %d %s", got.code, got.body)
	}
	for _, want := range []string{`<meta http-equiv="refresh" content="5">`, "replica-7", "host-test",
		"send_email", "m-1", "mcprel ledger resolve --db ", " --tenant acme --tool send_email --key m-1"} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	got = fetch(t, page+".json", metricsToken)
	var snap status.Snapshot
	if err := json.Unmarshal([]byte(got.body), &snap); err != nil || got.code != http.StatusOK {
		t.Fatalf("JSON: %d %v: %s", got.code, err, got.body)
	}
	if snap.Replica != "replica-7" || snap.Implementation != "host-test" || snap.StartedAt.IsZero() ||
		snap.Upstreams != nil || snap.Outbox != nil || snap.Tasks == nil || !snap.Tasks.Available || snap.Tenants == nil {
		t.Errorf("snapshot: %s", got.body)
	}
	if u := snap.Unknown; u == nil || !u.Available || u.Total != 1 || len(u.Outcomes) != 1 || u.Outcomes[0].Tenant != "acme" ||
		u.Outcomes[0].Key != "m-1" || u.Outcomes[0].Resolve != ledger.ResolveCommand(opts.DB, "acme", "send_email", "m-1") {
		t.Errorf("unknown outcomes: %s", got.body)
	}
}

// Beside the metrics on the endpoint's listener (Metrics.Path /metrics),
// the page is at /status and /status.json, behind the endpoint's Host and
// Origin checks and the metrics' authentication.
func TestStatusBesideTheMetricsPath(t *testing.T) {
	opts := options(t, storetest.SQLite(t), &steps{})
	opts.Addr = "127.0.0.1:0"
	opts.HTTP.AuthToken = token
	opts.Metrics.Path = "/metrics"
	rt, err := host.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := running(t, rt)
	defer stop()
	base := strings.TrimSuffix(rt.Endpoint(), host.DefaultPath)
	for _, u := range []string{base + "/status", base + "/status.json"} {
		if got := fetch(t, u, ""); got.code != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d, want 401", u, got.code)
		}
		if got := fetch(t, u, token); got.code != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", u, got.code)
		}
		metrics := get(t, base+"/metrics", "Authorization", "Bearer "+token, "Origin", "https://evil.example")
		got := get(t, u, "Authorization", "Bearer "+token, "Origin", "https://evil.example")
		if got.code != http.StatusForbidden || metrics.code != http.StatusForbidden {
			t.Errorf("%s from a foreign origin: %d (the metrics %d), want 403", u, got.code, metrics.code)
		}
	}
}

// A status page that would meet the endpoint or the metrics is refused at
// start-up, naming the clash.
func TestStatusPathClash(t *testing.T) {
	for _, tc := range []struct{ path, metrics string }{
		{"/status", "/metrics"},
		{"/status.json", "/metrics"},
		{"/mcp", "/status"},
		{"/x/status", "/x/metrics"},
	} {
		opts := options(t, storetest.SQLite(t), &steps{})
		opts.Addr = "127.0.0.1:0"
		opts.Path, opts.Metrics.Path = tc.path, tc.metrics
		rt, err := host.New(context.Background(), opts)
		if err == nil {
			rt.Close()
			t.Errorf("path %s, metrics %s: started", tc.path, tc.metrics)
		} else if !strings.Contains(err.Error(), "status page") {
			t.Errorf("path %s, metrics %s: %v", tc.path, tc.metrics, err)
		}
	}
}

// With 10,000 unknown outcomes the page lists 50, says how many more
// there are, and stays small.
func TestStatusWithManyUnknownOutcomes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		opts := options(t, dsn, &steps{})
		opts.Metrics.Addr = "127.0.0.1:0"
		opts.Metrics.Open = true
		rt, err := host.New(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		leaveUnknown(t, rt.Ledger(), "acme", "send_email", "seed")
		// 9,999 more like it, in one statement.
		err = rt.Ledger().DB().WriteTx(context.Background(), func(tx *store.Tx) error {
			_, err := tx.Exec(context.Background(), `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 9999)
				INSERT INTO mcprel_ledger (tenant, tool, idem_key, fingerprint, state, result, created_at, executed_at, expires_at, executions)
				SELECT tenant, tool, 'k-' || i, fingerprint, state, result, created_at, executed_at - i, expires_at, executions
				FROM mcprel_ledger, n WHERE idem_key = 'seed'`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		h := host.StatusPage(rt)
		began := time.Now()
		body := serve(t, h.HTML(), "/status")
		t.Logf("the page of 10,000 unknown outcomes: %d bytes in %v", len(body), time.Since(began))
		if n := strings.Count(body, "mcprel ledger resolve"); n != status.MaxUnknown {
			t.Errorf("%d listed, want %d", n, status.MaxUnknown)
		}
		if !strings.Contains(body, "and 9950 more") || len(body) > 100_000 {
			t.Errorf("%d bytes, says more: %v", len(body), strings.Contains(body, "and 9950 more"))
		}
		var snap status.Snapshot
		if err := json.Unmarshal([]byte(serve(t, h.JSON(), "/status.json")), &snap); err != nil {
			t.Fatal(err)
		}
		if u := snap.Unknown; !u.Available || u.Total != 10_000 || u.More != 9950 || len(u.Outcomes) != 50 || u.Outcomes[0].Key != "seed" {
			t.Errorf("unknown outcomes: total %d, more %d, %d listed", u.Total, u.More, len(u.Outcomes))
		}
	})
}

// serve runs h for a GET of path and returns the body.
func serve(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// Where tenants have tokens of their own and the metrics take them, one
// tenant's token would read every tenant's keys on the status page: it
// is refused until the metrics have a token of their own.
func TestStatusNeedsAMetricsTokenOfItsOwnBesideTenants(t *testing.T) {
	tenants := map[string]string{"alice-token": "alice", "bob-token": "bob"}
	for _, tc := range []struct {
		name string
		set  func(*host.Options)
	}{
		{"tokens", func(o *host.Options) { o.HTTP.Tokens = tenants }},
		{"an authenticator", func(o *host.Options) { o.HTTP.Authenticator = auth.StaticTokens("", tenants) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := options(t, storetest.SQLite(t), &steps{})
			opts.Addr = "127.0.0.1:0"
			tc.set(opts)
			opts.Metrics.Path = "/metrics"
			rt, err := host.New(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			_, stop := running(t, rt)
			defer stop()
			base := strings.TrimSuffix(rt.Endpoint(), host.DefaultPath)
			if got := fetch(t, base+"/metrics", "bob-token"); got.code != http.StatusOK {
				t.Errorf("the metrics with a tenant's token: %d", got.code)
			}
			for _, u := range []string{base + "/status", base + "/status.json"} {
				if got := fetch(t, u, "bob-token"); got.code != http.StatusForbidden || !strings.Contains(got.body, "--metrics-token") {
					t.Errorf("%s with a tenant's token: %d %s, want 403 naming --metrics-token", u, got.code, got.body)
				}
			}
		})
	}
}

// A replica's name is read by every replica's page: one that is too long
// or not printable UTF-8 is refused as the runtime is built.
func TestReplicaNameChecked(t *testing.T) {
	for _, name := range []string{strings.Repeat("r", 257), "bad\x00name", "bad\xffname", "line\nbreak"} {
		opts := options(t, storetest.SQLite(t), &steps{})
		opts.Replica = name
		if _, err := host.New(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "Options.Replica") {
			t.Errorf("replica %q: %v", name, err)
		}
	}
}
