package probe

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Death is the server's death as the probe noticed it: a stdio server's
// process that exited while a fixture still spoke to it, or an HTTP server
// that stopped taking connections.
type Death struct {
	// At is when it was noticed, from the run's start.
	At time.Duration `json:"at"`
	// During names the fixtures that were running ("12 tasks/cancel
	// (2026-07-28)"): over stdio the one whose process it was, over HTTP
	// every one then running, since which of them it died of is not
	// visible from outside.
	During []string `json:"during"`
	// How says what was seen: the exit status and the end of what the
	// process wrote on stderr, or the refused connection.
	How string `json:"how"`
}

// String is the death in a sentence, for a report.
func (d Death) String() string {
	return fmt.Sprintf("the server died %v into the run, while %s ran: %s", d.At.Round(time.Millisecond), strings.Join(d.During, ", "), d.How)
}

// vitals notices the server's death during a run. Over stdio every
// fixture has processes of its own, and one that exits unasked died
// during that fixture. Over HTTP one server serves every fixture: when a
// request cannot connect or a response is cut, the probe dials the
// server, and a refused dial means it stopped taking connections — the
// fixtures then running are told so and stopped, and none starts after.
type vitals struct {
	began time.Time
	addr  string        // HTTP: the host:port dialled
	wait  time.Duration // how long a dial may take

	mu      sync.Mutex
	running map[*recorder]bool
	deaths  []Death
	gone    chan struct{} // HTTP: closed once the server stopped taking connections
	stop    func()        // stops the fixtures running when it does

	check sync.Mutex // one dial at a time
}

func newVitals(t *Target, wait time.Duration, stop func()) *vitals {
	v := &vitals{began: time.Now(), wait: wait, running: map[*recorder]bool{}, gone: make(chan struct{}), stop: stop}
	if u, err := url.Parse(t.URL); err == nil && t.URL != "" {
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		v.addr = net.JoinHostPort(u.Hostname(), port)
	}
	return v
}

// starts and ends bracket a fixture's run.
func (v *vitals) starts(rec *recorder) {
	v.mu.Lock()
	v.running[rec] = true
	v.mu.Unlock()
}

func (v *vitals) ends(rec *recorder) {
	v.mu.Lock()
	delete(v.running, rec)
	v.mu.Unlock()
}

// during is the labels of the fixtures running, in order. v.mu is held.
func (v *vitals) during() []string {
	var out []string
	for rec := range v.running {
		out = append(out, rec.label)
	}
	slices.SortFunc(out, func(a, b string) int {
		var na, nb int
		fmt.Sscan(a, &na)
		fmt.Sscan(b, &nb)
		return cmp.Or(cmp.Compare(na, nb), strings.Compare(a, b))
	})
	return out
}

// exited records a stdio process's death during rec's fixture.
func (v *vitals) exited(rec *recorder, how string) Death {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := Death{At: time.Since(v.began), During: []string{rec.label}, How: how}
	v.deaths = append(v.deaths, d)
	return d
}

// suspect is told that a connection to an HTTP server failed (why): it
// dials the server, and when the dial is refused records its death and
// stops the fixtures. It returns once that is known, so that whoever saw
// the failure reports after the death is recorded.
func (v *vitals) suspect(why string) {
	if v == nil || v.addr == "" || v.isGone() {
		return
	}
	v.check.Lock()
	defer v.check.Unlock()
	if v.isGone() {
		return
	}
	conn, err := net.DialTimeout("tcp", v.addr, v.wait)
	if err == nil {
		conn.Close()
		return
	}
	v.mu.Lock()
	v.deaths = append(v.deaths, Death{At: time.Since(v.began), During: v.during(),
		How: fmt.Sprintf("it stopped taking connections (%v) after %s", err, why)})
	close(v.gone)
	v.mu.Unlock()
	v.stop()
}

// isGone reports whether the HTTP server stopped taking connections.
func (v *vitals) isGone() bool {
	select {
	case <-v.gone:
		return true
	default:
		return false
	}
}

// httpDeath is the HTTP server's death, once it stopped taking
// connections.
func (v *vitals) httpDeath() (Death, bool) {
	if !v.isGone() {
		return Death{}, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.deaths[len(v.deaths)-1], true
}

// all is every death noticed, in order.
func (v *vitals) all() []Death {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.deaths)
}

// diedDuring rewrites the outcome of the fixture rec recorded when the
// server died while it ran: it failed, saying so and how, before what the
// fixture saw. An HTTP server's death fails only what did not pass — a
// fixture that saw what it checks before the server went keeps its pass,
// with a note.
func (v *vitals) diedDuring(rec *recorder, out outcome) outcome {
	if d, in, ok := rec.died(); ok {
		out.status = Failed
		out.detail = fmt.Sprintf("the server died during this fixture, %v into it: %s; what the fixture saw: %s",
			in.Round(time.Millisecond), d.How, out.detail)
		return out
	}
	d, ok := v.httpDeath()
	if !ok || !slices.Contains(d.During, rec.label) {
		return out
	}
	if out.status == Passed {
		out.detail += fmt.Sprintf(" (then the server died, %v into the run)", d.At.Round(time.Millisecond))
		return out
	}
	while := "while this fixture ran"
	if others := slices.DeleteFunc(slices.Clone(d.During), func(l string) bool { return l == rec.label }); len(others) > 0 {
		while += fmt.Sprintf(" (as did %s: which one it died of is not visible from outside)", strings.Join(others, ", "))
	}
	out.status = Failed
	out.detail = fmt.Sprintf("the server died %v into the run, %s: %s; what the fixture saw: %s",
		d.At.Round(time.Millisecond), while, d.How, out.detail)
	return out
}
