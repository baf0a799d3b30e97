package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// The redirect tests run two servers on one in-memory network: the one
// the client was given (at originURL), which answers some requests with a
// redirect, and the one that redirect names (at elsewhereURL: the same
// host name on another port, so that net/http would even keep the
// Authorization header on the way), which records whatever reaches it
// and answers as a willing server would.
const (
	originURL    = "http://127.0.0.1/mcp"
	elsewhereURL = "http://127.0.0.1:8081/mcp"
)

// redirectStatuses are the statuses net/http follows: 307 and 308 with
// the body, 301, 302 and 303 as a GET.
var redirectStatuses = []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
	http.StatusTemporaryRedirect, http.StatusPermanentRedirect}

// credentials are the headers every request carries: a bearer token and a
// header of the kind an operator's headers file adds.
func credentials() http.Header {
	return http.Header{"Authorization": {"Bearer secret"}, "X-Api-Key": {"key-1"}}
}

// elsewhere is the server a redirect points at.
type elsewhere struct {
	mu  sync.Mutex
	got []string
}

func (e *elsewhere) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.got = append(e.got, fmt.Sprintf("%s %s Authorization=%q X-Api-Key=%q body=%q", r.Method, r.URL.RequestURI(),
		r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), body))
	e.mu.Unlock()
	m, derr := jsonrpc.Decode(body)
	switch {
	case r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
	case derr != nil || m.Kind != jsonrpc.KindRequest:
		w.WriteHeader(http.StatusAccepted)
	case m.Method == mcp.MethodInitialize:
		answerInitialize(w, []byte(m.ID.String()), "elsewhere")
	case m.Method == mcp.MethodDiscover:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}`, m.ID)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","content":[{"type":"text","text":"ran elsewhere"}]}}`, m.ID)
	}
}

// nothing fails the test if anything reached e.
func (e *elsewhere) nothing(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.got) != 0 {
		t.Fatalf("the redirect was followed: %s received\n%s", elsewhereURL, strings.Join(e.got, "\n"))
	}
}

// origin is a scripted server of either era that answers with status and
// a Location of elsewhereURL every request redirect picks.
type origin struct {
	modern   bool
	status   int
	redirect func(r *http.Request, m posted) bool

	mu   sync.Mutex
	seen []string // each request, as "METHOD jsonrpc-method"
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := peekPosted(r)
	o.mu.Lock()
	o.seen = append(o.seen, strings.TrimSpace(r.Method+" "+m.Method))
	o.mu.Unlock()
	if o.redirect(r, m) {
		w.Header().Set("Location", elsewhereURL)
		w.WriteHeader(o.status)
		return
	}
	switch {
	case r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.Method == http.MethodDelete:
	case m.Method == mcp.MethodDiscover && o.modern:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}`, m.ID)
	case m.Method == mcp.MethodDiscover:
		w.WriteHeader(http.StatusNotFound) // a 2025 server
	case m.Method == mcp.MethodInitialize:
		w.Header().Set("Mcp-Session-Id", "s1")
		answerInitialize(w, m.ID, "origin")
	case m.ID == nil:
		w.WriteHeader(http.StatusAccepted)
	case m.Method == mcp.MethodToolsCall && !o.modern:
		// The call's stream ends before its response, having given an
		// event id: the client resumes it with a GET.
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: e1\nretry: 10\ndata: \n\n")
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ran here"}]}}`, m.ID)
	}
}

func (o *origin) requests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

// hosts serves origin at originURL's host and e at elsewhereURL's, on one
// in-memory network, and returns the client that reaches both. The
// client's CheckRedirect follows every redirect, as a caller's may: the
// client must not use it.
func hosts(t *testing.T, origin http.Handler, e *elsewhere) (*http.Client, *atomic.Int32) {
	hc := servePipe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "127.0.0.1:8081" {
			e.ServeHTTP(w, r)
			return
		}
		origin.ServeHTTP(w, r)
	}))
	asked := new(atomic.Int32)
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { asked.Add(1); return nil }
	return hc, asked
}

// callersUntouched fails the test if the client asked the caller's
// CheckRedirect (from hosts) or replaced it.
func callersUntouched(t *testing.T, hc *http.Client, asked *atomic.Int32) {
	t.Helper()
	if n := asked.Load(); n != 0 {
		t.Fatalf("the client asked the caller's CheckRedirect %d times", n)
	}
	if hc.CheckRedirect(nil, nil); asked.Load() != 1 {
		t.Fatal("the caller's CheckRedirect was replaced")
	}
}

// wantRedirect fails the test unless err is the *RedirectError of status
// pointing at elsewhereURL, saying where it pointed.
func wantRedirect(t *testing.T, err error, status int) {
	t.Helper()
	var re *client.RedirectError
	if !errors.As(err, &re) || re.Status != status || re.Location != elsewhereURL {
		t.Fatalf("err %v (%T); want a *client.RedirectError of HTTP %d to %s", err, err, status, elsewhereURL)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprint(status)) || !strings.Contains(msg, elsewhereURL) || strings.Count(msg, "client:") != 1 {
		t.Fatalf("the error says %q; want the status and where it pointed, the client named once", msg)
	}
	if f := client.VerdictOf(nil, err); f.Kind != retry.Rejected || f.Outcome != retry.OutcomeRefused {
		t.Fatalf("VerdictOf: %v, %v; want rejected, refused (the request did not run, and would be redirected again)", f.Kind, f.Outcome)
	}
}

// redirectScene is what a redirect test's check works with.
type redirectScene struct {
	c      *client.Client // nil when the dial failed
	origin *origin
	log    *mcptest.LogBuffer
}

// A Streamable HTTP server that answers any request — of either era,
// while connecting or after — with a redirect does not get it followed:
// nothing reaches the address it names (no credential, no body), and the
// request fails with a *RedirectError naming the status and where it
// pointed, which retry classes as rejected: not made again, even for a
// tool that is safe to retry. A redirect of a stream's GET (the 2025
// session's, or a resumption's) is logged with where it pointed; the
// resumed call is lost, since its POST reached the server. The caller's
// http.Client is used as it is, except that its CheckRedirect is never
// asked, and stays as it was.
func TestHTTPRedirectIsNotFollowed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		era      mcp.Era
		redirect func(r *http.Request, m posted) bool
		// check makes the request that is redirected; dialErr is the
		// dial's error, for a redirect while connecting.
		check func(t *testing.T, s redirectScene, status int, dialErr error)
	}{
		{"server/discover", mcp.Modern, isMethod(mcp.MethodDiscover), failsDial},
		{"server/discover, era negotiated", 0, isMethod(mcp.MethodDiscover), func(t *testing.T, s redirectScene, status int, err error) {
			failsDial(t, s, status, err)
			if got := s.origin.requests(); len(got) != 1 {
				t.Fatalf("the server saw %q; want only the redirected server/discover (no initialize after it)", got)
			}
		}},
		{"initialize", mcp.Legacy, isMethod(mcp.MethodInitialize), failsDial},
		{"notifications/initialized", mcp.Legacy, isMethod(mcp.NotificationInitialized), failsDial},
		{"tools/call, 2026-07-28", mcp.Modern, isMethod(mcp.MethodToolsCall), failsCall},
		{"tools/call, 2025", mcp.Legacy, isMethod(mcp.MethodToolsCall), failsCall},
		{"the session's stream", mcp.Legacy, func(r *http.Request, _ posted) bool { return r.Method == http.MethodGet },
			func(t *testing.T, s redirectScene, status int, err error) {
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				wantLogged(t, s.log, status)
			}},
		{"a resumption", mcp.Legacy, func(r *http.Request, _ posted) bool { return r.Header.Get(mcp.HeaderLastEventID) != "" },
			func(t *testing.T, s redirectScene, status int, err error) {
				if err != nil {
					t.Fatal(err)
				}
				_, err = s.c.CallTool(context.Background(), "cut", nil, nil)
				if !errors.Is(err, client.ErrConnectionLost) {
					t.Fatalf("the call whose resumption was redirected: %v; want ErrConnectionLost (its POST reached the server)", err)
				}
				synctest.Wait()
				wantLogged(t, s.log, status)
			}},
		{"DELETE of the session", mcp.Legacy, func(r *http.Request, _ posted) bool { return r.Method == http.MethodDelete },
			func(t *testing.T, s redirectScene, status int, err error) {
				if err != nil {
					t.Fatal(err)
				}
				s.c.Close()
				if got := s.origin.requests(); got[len(got)-1] != http.MethodDelete {
					t.Fatalf("the server saw %q; want the DELETE last", got)
				}
			}},
	} {
		for _, status := range redirectStatuses {
			t.Run(fmt.Sprintf("%s/%d", tc.name, status), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					o := &origin{modern: tc.era != mcp.Legacy, status: status, redirect: tc.redirect}
					e := &elsewhere{}
					hc, asked := hosts(t, o, e)
					log := &mcptest.LogBuffer{}
					c, err := client.DialHTTP(context.Background(), originURL, &client.Options{
						HTTPClient: hc, Era: tc.era, Header: credentials(), Logger: log.Logger()})
					if err == nil {
						t.Cleanup(func() { c.Close() })
					}
					tc.check(t, redirectScene{c, o, log}, status, err)
					synctest.Wait()
					e.nothing(t)
					callersUntouched(t, hc, asked)
				})
			})
		}
	}
}

func isMethod(method string) func(*http.Request, posted) bool {
	return func(r *http.Request, m posted) bool { return r.Method == http.MethodPost && m.Method == method }
}

func failsDial(t *testing.T, _ redirectScene, status int, err error) {
	t.Helper()
	wantRedirect(t, err, status)
}

// failsCall calls a tool the retry table calls safe: its redirect ends
// it after one attempt.
func failsCall(t *testing.T, s redirectScene, status int, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.c.CallToolWithRetries(context.Background(), "read", nil, nil,
		&client.Retries{Planner: planner("read", mcp.RetrySafe, retry.Options{})})
	if err == nil {
		t.Fatalf("the redirected call answered %+v", res)
	}
	wantRedirect(t, err, status)
	calls := 0
	for _, r := range s.origin.requests() {
		if r == "POST "+mcp.MethodToolsCall {
			calls++
		}
	}
	if calls != 1 {
		t.Fatalf("the server saw %d tools/call; want 1: a redirect is not retried", calls)
	}
}

// wantLogged fails the test unless the client logged a redirect of status
// to elsewhereURL.
func wantLogged(t *testing.T, log *mcptest.LogBuffer, status int) {
	t.Helper()
	for _, rec := range log.Records(t) {
		if rec["location"] == elsewhereURL && rec["status"] == float64(status) {
			return
		}
	}
	t.Fatalf("no log line names the redirect of HTTP %d to %s:\n%s", status, elsewhereURL, log.String())
}

// peekPosted is readPosted that leaves r's body to be read again.
func peekPosted(r *http.Request) posted {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	m := readPosted(&http.Request{Body: io.NopCloser(bytes.NewReader(body))})
	return m
}

// The HTTP+SSE transport follows no redirect either: not of its stream's
// GET, nor of a POST to the endpoint the stream named. The dial, or the
// call, fails with the *RedirectError, and nothing reaches the address
// it names.
func TestSSERedirectIsNotFollowed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		redirect func(r *http.Request, m posted) bool
		call     bool // the redirect is the call's; the dial succeeds
	}{
		{"the stream's GET", func(r *http.Request, _ posted) bool { return r.Method == http.MethodGet }, false},
		{"initialize at the endpoint", isMethod(mcp.MethodInitialize), false},
		{"notifications/initialized at the endpoint", isMethod(mcp.NotificationInitialized), false},
		{"tools/call at the endpoint", isMethod(mcp.MethodToolsCall), true},
	} {
		for _, status := range redirectStatuses {
			t.Run(fmt.Sprintf("%s/%d", tc.name, status), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := newSSEServer(t, nil)
					redirecting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if tc.redirect(r, peekPosted(r)) {
							w.Header().Set("Location", elsewhereURL)
							w.WriteHeader(status)
							return
						}
						s.ServeHTTP(w, r)
					})
					e := &elsewhere{}
					hc, asked := hosts(t, redirecting, e)
					c, err := client.DialSSE(context.Background(), "http://127.0.0.1/sse", &client.Options{HTTPClient: hc, Header: credentials()})
					if err == nil {
						t.Cleanup(func() { c.Close() })
					}
					if tc.call {
						if err != nil {
							t.Fatal(err)
						}
						_, err = c.CallTool(context.Background(), "work", nil, nil)
					}
					wantRedirect(t, err, status)
					synctest.Wait()
					e.nothing(t)
					callersUntouched(t, hc, asked)
				})
			})
		}
	}
}
