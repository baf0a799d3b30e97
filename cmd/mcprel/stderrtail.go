package main

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// The bounds of a stdio server's stderr kept by "mcprel call --stdio" and
// "mcprel review --stdio": enough for the lines that say why a server
// failed (they come last), never more than a few KiB however much it logs.
const (
	stderrTailLines     = 20
	stderrTailBytes     = 8 << 10
	stderrTailLineBytes = 2 << 10 // a longer line is cut, so that several fit
)

// stderrTail keeps the end of a stdio server's stderr instead of passing
// it through: a server's request log is noise beside the call's own
// output, but the lines before a failure are what explains it, so they are
// shown when the call fails or the server dies (show). It keeps at most
// stderrTailLines complete lines and stderrTailBytes bytes, the latest;
// a line longer than stderrTailLineBytes is cut. It is safe for the concurrent writes of the
// process's stderr copier and the reads of show.
type stderrTail struct {
	mu      sync.Mutex
	lines   [][]byte // complete lines, oldest first, without their newline
	size    int      // bytes in lines
	part    []byte   // the line being written, at most stderrTailLineBytes
	cut     bool     // part lost bytes past the bound
	dropped int      // lines that fell out of the tail
}

// Write keeps p's lines. It never fails: a server must not stall on its
// stderr because nobody shows it.
func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := stderrTailLineBytes - len(t.part); len(chunk) > room {
			chunk, t.cut = chunk[:room], true
		}
		t.part = append(t.part, chunk...)
		if i < 0 {
			break
		}
		t.push()
		p = p[i+1:]
	}
	return n, nil
}

// push ends the line being written and evicts the oldest past the bounds.
func (t *stderrTail) push() {
	line := t.part
	if t.cut {
		line = append(line, " …"...)
	}
	t.lines = append(t.lines, line)
	t.size += len(line)
	t.part, t.cut = nil, false
	for len(t.lines) > stderrTailLines || t.size > stderrTailBytes {
		t.size -= len(t.lines[0])
		t.lines[0] = nil
		t.lines = t.lines[1:]
		t.dropped++
	}
}

// show writes the kept lines to w, indented under a line that says what
// they are; nothing when the server wrote nothing.
func (t *stderrTail) show(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if len(t.part) > 0 {
		lines = append(lines[:len(lines):len(lines)], t.part)
	}
	if len(lines) == 0 {
		return
	}
	what := "the server's stderr"
	if t.dropped > 0 {
		what = fmt.Sprintf("the last %d lines of the server's stderr", len(lines))
	}
	fmt.Fprintf(w, "mcprel: %s (--server-stderr passes it through):\n", what)
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}
