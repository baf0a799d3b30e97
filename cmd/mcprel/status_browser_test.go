package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/ledgertest"
)

// chromium is the browser the status page is read with.
const chromium = "/usr/bin/chromium"

// A person who opens the status page of a running gateway in a real
// browser sees the upstream that is down and the unknown outcome waiting,
// with the command that closes it. The page needs the metrics' token,
// which a browser's command line cannot send: a local proxy adds it.
func TestStatusPageInABrowser(t *testing.T) {
	browser, err := exec.LookPath(chromium)
	if err != nil {
		if os.Getenv("MCPREL_REQUIRE_INTEROP") == "1" {
			t.Fatalf("chromium is not installed at %s: make interop-deps installs it (MCPREL_REQUIRE_INTEROP=1): %v", chromium, err)
		}
		t.Skipf("chromium is not installed at %s (make interop-deps installs it; MCPREL_REQUIRE_INTEROP=1 makes this a failure)", chromium)
	}
	const token = "status-page-t0ken"
	dir := t.TempDir()
	db := filepath.Join(dir, "gw.db")

	// An unknown outcome in the gateway's ledger, as a forward whose
	// answer was lost leaves it.
	l := ledgertest.Open(t, db, nil, nil, "")
	unknownOutcome(t, l, "acme", "send_payout", "payout-42")

	good, _ := startHTTP(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/mcp" // nobody listens here
	ln.Close()
	_, _, rest := startEndpoint(t, nil, "gateway", "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--metrics-token", token,
		"--upstream", "good="+good, "--upstream", "dead="+dead, "--db", db)
	var statusURL string
	for line := range rest {
		if u, ok := strings.CutPrefix(line, "status: "); ok {
			statusURL = u
			break
		}
	}
	if statusURL == "" {
		t.Fatal("the gateway did not print its status page's URL")
	}
	target, err := url.Parse(statusURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target.Host})
	direct := proxy.Director
	proxy.Director = func(r *http.Request) {
		direct(r)
		r.Header.Set("Authorization", "Bearer "+token)
	}
	ps := httptest.NewServer(proxy)
	t.Cleanup(ps.Close)
	page := ps.URL + target.Path

	if code := scrape(t, statusURL, ""); code != http.StatusUnauthorized {
		t.Fatalf("the page without the token: %d, want 401", code)
	}

	// The dead upstream has failed to connect by the time the gateway
	// serves; the page is read until it shows everything, within a bound.
	var dom string
	deadline := time.Now().Add(30 * time.Second)
	for {
		dom = dumpDOM(t, browser, page)
		if strings.Contains(dom, "could not connect") && strings.Contains(dom, "payout-42") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed the dead upstream's error and the unknown outcome:\n%s", dom)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		"<td>dead</td>", `class="bad">down</td>`, "<td>good</td>", `class="ok">connected</td>`,
		"<td>send_payout</td>", "payout-42",
		"mcprel ledger resolve --db " + db + " --tenant acme --tool send_payout --key payout-42",
		"Tasks", "working",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the browser's page lacks %q", want)
		}
	}
	if strings.Contains(dom, token) {
		t.Errorf("the page shows the metrics' token")
	}

	shot := filepath.Join(t.ArtifactDir(), "status.png")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, append(chromiumFlags(t), "--screenshot="+shot, "--window-size=1280,1600", page)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot of the status page: %s", shot)
}

// chromiumFlags run chromium headless, in a profile of the test's own.
func chromiumFlags(t *testing.T) []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
		"--user-data-dir=" + t.TempDir()}
}

// dumpDOM is the page at url as chromium renders it.
func dumpDOM(t *testing.T, browser, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, append(chromiumFlags(t), "--dump-dom", url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
	}
	return string(out)
}
