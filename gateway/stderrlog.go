package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// stderrLog turns a stdio upstream's stderr into log records, each named
// by the upstream: one record per line the upstream wrote, however its
// writes split it. A line longer than maxStderrLine is cut, and the rest
// of it dropped and counted (cut_bytes), never logged as lines of their
// own: an upstream that writes without newlines cannot grow the gateway's
// memory, nor its log.
//
// Lines are logged at info within a budget — a burst of stderrBurst, one
// more for each stderrQuiet the upstream spends quiet — so that what an
// upstream says when it starts or dies is in the log at its default
// level; past it they go to debug, with one record at info saying so, so
// that a chatty upstream does not flood the gateway's log.
type stderrLog struct {
	log *slog.Logger

	mu     sync.Mutex
	buf    []byte
	cut    int           // bytes of the current line dropped past maxStderrLine
	budget *rate.Limiter // lines at info; made on the first line
	over   bool          // past the budget: lines go to debug
}

const (
	maxStderrLine = 4096
	stderrBurst   = 20
	stderrQuiet   = 10 * time.Second
)

func (s *stderrLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		line, rest, ended := bytes.Cut(p, []byte{'\n'})
		take := min(len(line), maxStderrLine-len(s.buf))
		s.buf = append(s.buf, line[:take]...)
		s.cut += len(line) - take
		if !ended {
			break
		}
		s.flush()
		p = rest
	}
	return n, nil
}

// flush logs the line in buf, within the budget at info.
func (s *stderrLog) flush() {
	if s.budget == nil {
		s.budget = rate.NewLimiter(rate.Every(stderrQuiet), stderrBurst)
	}
	level := slog.LevelInfo
	switch ok := s.budget.Allow(); {
	case !ok && !s.over:
		s.over = true
		s.log.Info("upstream stderr: more lines than the log takes at info; the next are logged at debug (--log-level debug) until the upstream is quiet a while")
		level = slog.LevelDebug
	case !ok:
		level = slog.LevelDebug
	default:
		s.over = false
	}
	line := bytes.TrimSuffix(s.buf, []byte{'\r'})
	if s.cut > 0 {
		s.log.Log(context.Background(), level, "upstream stderr", "line", string(line), "cut_bytes", s.cut)
	} else {
		s.log.Log(context.Background(), level, "upstream stderr", "line", string(line))
	}
	s.buf, s.cut = s.buf[:0], 0
}

var _ io.Writer = (*stderrLog)(nil)
