package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// The loopback receiver takes one callback and hands its full URL back;
// a second is told the link was used, another path is 404, another
// method 405, an oversized request is refused without being taken, and
// a failure page shows the error escaped.
func TestReceiverTakesOneCallback(t *testing.T) {
	r, err := listenLoopback("")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if !strings.HasPrefix(r.url, "http://127.0.0.1:") || !strings.HasSuffix(r.url, "/callback") {
		t.Fatalf("redirect URI %s", r.url)
	}
	type result struct {
		u   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		u, err := r.wait(t.Context())
		done <- result{u, err}
	}()
	get := func(u string) (int, string) {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	base := strings.TrimSuffix(r.url, "/callback")
	if code, _ := get(base + "/favicon.ico"); code != http.StatusNotFound {
		t.Fatalf("another path: %d", code)
	}
	if resp, err := http.Post(r.url, "text/plain", strings.NewReader("x")); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %v %v", resp, err)
	}
	if code, _ := get(r.url + "?code=" + strings.Repeat("x", 64<<10)); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("an oversized callback: %d", code)
	}
	callback := r.url + "?error=access_denied&error_description=%3Cscript%3Eno%3C%2Fscript%3E&state=s"
	code, body := get(callback)
	if code != http.StatusOK || !strings.Contains(body, "access_denied (&lt;script&gt;no&lt;/script&gt;)") || strings.Contains(body, "<script>") {
		t.Fatalf("the callback: %d %s", code, body)
	}
	res := <-done
	if res.err != nil || res.u != callback {
		t.Fatalf("wait returned %q, %v; want %q", res.u, res.err, callback)
	}
	// The port is closed once the callback is taken; a late one is told.
	if _, err := http.Get(callback); err == nil {
		t.Fatal("the port is still open after the callback")
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, callback, nil))
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "already used") {
		t.Fatalf("a second callback: %d %s", rec.Code, rec.Body.String())
	}

	// Two at once: one is taken, the other told it was used (or finds
	// the port closed); wait returns the one taken.
	go func() {
		u, err := r.wait(t.Context())
		done <- result{u, err}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 2 {
		wg.Go(func() {
			for { // until the port is open again
				resp, err := http.Get(fmt.Sprintf("%s?code=c%d&state=s", r.url, i))
				if err != nil {
					select {
					case <-done:
						return
					default:
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	if codes[http.StatusOK] != 1 || codes[http.StatusConflict]+codes[http.StatusOK] > 2 {
		t.Fatalf("two callbacks at once were answered %v", codes)
	}
}

// A sign-in nobody finishes ends when its context does, and closes the
// port.
func TestReceiverWaitEnds(t *testing.T) {
	r, err := listenLoopback("")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := r.wait(ctx); err == nil || !strings.Contains(err.Error(), "no redirect came to "+r.url+" in time") {
		t.Fatalf("wait: %v", err)
	}
	if _, err := http.Get(r.url); err == nil {
		t.Fatal("the port is still open")
	}
}
