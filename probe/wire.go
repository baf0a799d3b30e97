package probe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// Frame is one message on the wire as the probe saw it: the evidence a
// failed fixture shows.
type Frame struct {
	// At is when, from the fixture's start.
	At time.Duration `json:"at"`
	// Dir is "sent", "received", or "note" for what the probe did that is
	// no message (a stream closed, reading paused).
	Dir  string `json:"dir"`
	Text string `json:"text"`
}

// What a fixture keeps for its report is bounded, whatever the server
// sends: at most maxFrames frames — the first headFrames (the requests
// that began it) and the latest (where a failure shows), the frames
// between counted in a note — each clipped to maxFrameText bytes.
const (
	maxFrames    = 256
	headFrames   = 32
	maxFrameText = 600
)

// recorder keeps the frames of one fixture, in order, within maxFrames.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	head  []Frame // the first headFrames
	tail  []Frame // a ring of the latest, at most maxFrames-headFrames-1
	next  int     // where the ring's next frame goes, once it is full
	// skipped is how many frames came between head and tail, not kept.
	skipped int

	v       *vitals // the run's, which it tells of the server's death; nil outside a fixture
	label   string  // the fixture's, as a Death names it
	death   *Death  // a stdio process of the fixture exited unasked
	deathIn time.Duration
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

func (r *recorder) add(dir string, text []byte) {
	n := len(text)
	if n > maxFrameText {
		text = text[:maxFrameText]
	}
	t := string(text)
	if n > maxFrameText {
		t += fmt.Sprintf("… (%d bytes)", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := Frame{At: time.Since(r.start).Round(time.Microsecond), Dir: dir, Text: t}
	switch {
	case len(r.head) < headFrames:
		r.head = append(r.head, f)
	case len(r.tail) < maxFrames-headFrames-1:
		r.tail = append(r.tail, f)
	default:
		r.tail[r.next] = f
		r.next = (r.next + 1) % len(r.tail)
		r.skipped++
	}
}

func (r *recorder) note(format string, args ...any) { r.add("note", fmt.Appendf(nil, format, args...)) }

// exited records that a stdio process of the fixture exited unasked, and
// how: the server died during this fixture.
func (r *recorder) exited(how string) {
	r.note("the server died: %s", how)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.death != nil {
		return
	}
	in := time.Since(r.start)
	d := Death{At: in, During: []string{r.label}, How: how}
	if r.v != nil {
		d = r.v.exited(r, how)
	}
	r.death, r.deathIn = &d, in
}

// died returns the death exited recorded, and how long into the fixture
// it came.
func (r *recorder) died() (Death, time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.death == nil {
		return Death{}, 0, false
	}
	return *r.death, r.deathIn, true
}

// suspect tells the run that a connection of this fixture to the HTTP
// server failed (what failed, and how), and returns once the run knows
// whether the server died.
func (r *recorder) suspect(what, how string) {
	if r.v != nil {
		r.v.suspect(fmt.Sprintf("%s in fixture %s %s", what, r.label, how))
	}
}

// frames returns the frames kept, in order; where some were not kept, a
// note between says how many.
func (r *recorder) frames() []Frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Frame, 0, len(r.head)+len(r.tail)+1)
	out = append(out, r.head...)
	tail := append(append([]Frame(nil), r.tail[r.next:]...), r.tail[:r.next]...)
	if r.skipped > 0 {
		out = append(out, Frame{At: tail[0].At, Dir: "note",
			Text: fmt.Sprintf("… %d frames not kept (a fixture keeps its first %d and its latest %d)", r.skipped, headFrames, len(r.tail))})
	}
	return append(out, tail...)
}

// inbound is a message the server sent, decoded, with when it came.
type inbound struct {
	msg jsonrpc.Message
	raw []byte // msg's members alias it
	at  time.Time
	seq int // its place among what the connection received, from 0
}

// keptCost is what a kept message costs: its bytes, and its decoded form
// beside them.
func (m inbound) keptCost() int { return len(m.raw) + 256 }

// keepRank orders messages for keeping when a mailbox is full: the
// lowest go first. Answers — what the probe's requests wait on — are
// kept longest, then progress; log and other notifications, requests and
// lines that are no message go first.
func (m inbound) keepRank() int {
	switch {
	case m.msg.Kind == jsonrpc.KindResponse || answersNotification(m):
		return 2
	case m.msg.Kind == jsonrpc.KindNotification && m.msg.Method == mcp.NotificationProgress:
		return 1
	}
	return 0
}

// isResponseTo reports whether m answers the request with id.
func (m inbound) isResponseTo(id int64) bool {
	n, ok := m.msg.ID.Int()
	return m.msg.Kind == jsonrpc.KindResponse && ok && n == id
}

// progressOf returns a progress notification's token and value.
func (m inbound) progressOf() (token string, value float64, ok bool) {
	if m.msg.Kind != jsonrpc.KindNotification || m.msg.Method != mcp.NotificationProgress {
		return "", 0, false
	}
	var p struct {
		Token    json.RawMessage `json:"progressToken"`
		Progress float64         `json:"progress"`
	}
	if json.Unmarshal(m.msg.Params, &p) != nil {
		return "", 0, false
	}
	return strings.Trim(string(p.Token), `"`), p.Progress, true
}

// A mailbox keeps at most maxKept messages and maxKeptBytes of them,
// whatever the server sends: past either, the least needed go first
// (keepRank), oldest first. maxMessage bounds one message the probe
// reads — a stdio line, an SSE event, an HTTP body — and one longer ends
// its connection with errTooLong.
const (
	maxKept      = 2048
	maxKeptBytes = 16 << 20
	maxMessage   = 8 << 20
)

// tooLong is how a connection ends when the server sent what (a line, an
// event, a response body) longer than maxMessage.
type tooLong struct{ what string }

func (e *tooLong) Error() string {
	return fmt.Sprintf("the server sent %s longer than %d MiB, the most the probe reads", e.what, maxMessage>>20)
}

func errTooLong(what string) error { return &tooLong{what} }

// mailbox holds what one connection (or one HTTP response stream)
// received, in order, within its bounds, for fixtures to wait on. A
// message's place (seq) counts every message received, kept or not.
type mailbox struct {
	mu      sync.Mutex
	msgs    []inbound // kept, in order of seq
	next    int       // the next message's seq: how many came
	bytes   int       // what msgs cost (keptCost)
	dropped int       // messages received and not kept
	ended   error     // the stream ended: io.EOF, or why
	endedAt time.Time // when
	changed chan struct{}
}

func newMailbox() *mailbox { return &mailbox{changed: make(chan struct{})} }

func (b *mailbox) put(m inbound) {
	b.mu.Lock()
	m.seq = b.next
	b.next++
	b.msgs = append(b.msgs, m)
	b.bytes += m.keptCost()
	b.trim()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// trim lets go of messages past the bounds, the least needed and oldest
// first, down to three quarters of each bound at once, so that a flood
// costs one pass per quarter of the bound, not one per message.
func (b *mailbox) trim() {
	n, size := 0, 0
	if len(b.msgs) > maxKept {
		n = len(b.msgs) - maxKept*3/4
	}
	if b.bytes > maxKeptBytes {
		size = b.bytes - maxKeptBytes*3/4
	}
	for rank := 0; rank <= 2 && (n > 0 || size > 0); rank++ {
		kept := b.msgs[:0]
		for _, m := range b.msgs {
			if (n > 0 || size > 0) && m.keepRank() == rank {
				n--
				size -= m.keptCost()
				b.bytes -= m.keptCost()
				b.dropped++
				continue
			}
			kept = append(kept, m)
		}
		clear(b.msgs[len(kept):])
		b.msgs = kept
	}
}

func (b *mailbox) end(err error) {
	b.mu.Lock()
	if b.ended == nil {
		b.ended, b.endedAt = err, time.Now()
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// first is the index in msgs of the first kept message whose seq is at
// least from.
func (b *mailbox) first(from int) int {
	return sort.Search(len(b.msgs), func(i int) bool { return b.msgs[i].seq >= from })
}

// wait returns the first message from seq from on that ok accepts, and
// the seq after it; false once the deadline passed or the stream ended
// without one.
func (b *mailbox) wait(ctx context.Context, from int, timeout time.Duration, ok func(inbound) bool) (inbound, int, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		b.mu.Lock()
		for _, m := range b.msgs[b.first(from):] {
			if ok(m) {
				b.mu.Unlock()
				return m, m.seq + 1, true
			}
		}
		from = b.next
		ended, ch := b.ended, b.changed
		b.mu.Unlock()
		if ended != nil {
			return inbound{}, from, false
		}
		select {
		case <-ch:
		case <-timer.C:
			return inbound{}, from, false
		case <-ctx.Done():
			return inbound{}, from, false
		}
	}
}

// since returns the messages kept from seq from on.
func (b *mailbox) since(from int) []inbound {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.first(from)
	if i >= len(b.msgs) {
		return nil
	}
	return append([]inbound(nil), b.msgs[i:]...)
}

// count is how many messages came so far, kept or not: the seq of the
// next.
func (b *mailbox) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.next
}

// endedWith reports whether the stream ended, and how.
func (b *mailbox) endedWith() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended
}

// endedWhen reports when the stream ended, and how; a nil error while it
// has not.
func (b *mailbox) endedWhen() (time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.endedAt, b.ended
}

// clientInfo is who the probe says it is.
var clientInfo = map[string]any{"name": "mcprel-probe", "version": "0.1.0"}

// params builds a request's params for era: the members given, with the
// 2026-07-28 era's _meta (version, capabilities, client info) and a
// progress token when one is asked for.
func params(era mcp.Era, members map[string]any, token string, caps map[string]any) map[string]any {
	out := make(map[string]any, len(members)+1)
	for k, v := range members {
		out[k] = v
	}
	meta := map[string]any{}
	if m, ok := out["_meta"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	if token != "" {
		meta[mcp.MetaProgressToken] = token
	}
	if era == mcp.Modern {
		if caps == nil {
			caps = map[string]any{}
		}
		meta[mcp.MetaProtocolVersion] = mcp.Version20260728
		meta[mcp.MetaClientCapabilities] = caps
		meta[mcp.MetaClientInfo] = clientInfo
	}
	if len(meta) > 0 {
		out["_meta"] = meta
	}
	return out
}

// requestFrame encodes a JSON-RPC request; id < 0 makes a notification.
func requestFrame(id int64, method string, p any) []byte {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if id >= 0 {
		msg["id"] = id
	}
	if p != nil {
		msg["params"] = p
	}
	b, _ := json.Marshal(msg)
	return b
}

// stdioPeer is one server process spoken to over stdio.
type stdioPeer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	box    *mailbox
	rec    *recorder
	stderr *tail
	era    mcp.Era

	wmu      sync.Mutex
	next     int64
	lastSent string // the method of the last message sent

	closing  atomic.Bool   // the probe is ending the process
	reapOnce sync.Once     // cmd.Wait, called once
	reaped   chan struct{} // closed once the process exited and was waited for

	gate chan struct{} // while not nil, the reader waits for it: the probe stopped reading
	gmu  sync.Mutex
}

// tail keeps the end of what a process wrote on stderr.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 4 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = t.buf[len(t.buf)-tailBytes:]
	}
	t.mu.Unlock()
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// startStdio starts argv and speaks era to it: the 2025 era's handshake
// is made here.
func startStdio(ctx context.Context, t *Target, era mcp.Era, rec *recorder, timeout time.Duration) (*stdioPeer, error) {
	cmd := exec.Command(t.Command[0], t.Command[1:]...)
	cmd.Env = append(os.Environ(), t.Env...)
	p := &stdioPeer{cmd: cmd, box: newMailbox(), rec: rec, stderr: &tail{}, era: era, next: 1, reaped: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, &UnreachableError{Target: t.String(), Err: err}
	}
	p.stdin = stdin
	go p.read(stdout)
	if era == mcp.Legacy {
		if err := p.handshake(ctx, timeout); err != nil {
			p.close()
			return nil, err
		}
	}
	return p, nil
}

func (p *stdioPeer) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		p.gmu.Lock()
		gate := p.gate
		p.gmu.Unlock()
		if gate != nil {
			<-gate
		}
		line, err := readLine(br)
		if err == nil || err == io.EOF {
			if raw := bytes.Clone(bytes.TrimSpace(line)); len(raw) > 0 {
				p.rec.add("received", raw)
				msg, _ := jsonrpc.Decode(raw) // a line that is no message is kept as it came
				p.box.put(inbound{msg: msg, raw: raw, at: time.Now()})
			}
		}
		if err != nil {
			var tl *tooLong
			if !errors.As(err, &tl) {
				if state, died := p.lost(); died {
					err = fmt.Errorf("its process exited (%s)", state)
				}
			}
			p.box.end(err)
			return
		}
	}
}

// exitWait is how long the probe waits for a process to exit: one whose
// output ended or whose input broke, one it closed the input of.
const exitWait = 2 * time.Second

// reap waits for the process to exit, once; every caller returns when it
// did.
func (p *stdioPeer) reap() {
	p.reapOnce.Do(func() {
		p.cmd.Wait()
		close(p.reaped)
	})
}

// lost is told that the process's output ended or its input broke. If the
// probe was not ending it and it exits within exitWait, the server died
// during the fixture: the recorder is told, before anyone reports what
// broke, and lost returns its exit status.
func (p *stdioPeer) lost() (string, bool) {
	if p.closing.Load() {
		return "", false // the end is the probe's own doing
	}
	go p.reap()
	select {
	case <-p.reaped:
	case <-time.After(exitWait):
		return "", false // its output ended, and it lives on
	}
	state := p.cmd.ProcessState.String()
	p.wmu.Lock()
	after := p.lastSent
	p.wmu.Unlock()
	if after != "" {
		after = " after the probe sent " + after
	}
	p.rec.exited(fmt.Sprintf("its process exited (%s)%s%s", state, after, p.stderrNote()))
	return state, true
}

// readLine reads one newline-ended line of at most maxMessage bytes; a
// longer one is errTooLong, and what of it was read is not returned.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxMessage {
			return nil, errTooLong("a line")
		}
		line = append(line, chunk...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// pause stops reading the server's output (as a slow consumer does);
// resume reads on.
func (p *stdioPeer) pause() {
	p.gmu.Lock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
	p.gmu.Unlock()
	p.rec.note("the probe stopped reading the server's output")
}

func (p *stdioPeer) resume() {
	p.gmu.Lock()
	defer p.gmu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
		p.rec.note("the probe reads the server's output again")
	}
}

// write sends one frame. When the process's input is broken, and the
// process exited, the error says so.
func (p *stdioPeer) write(frame []byte) error {
	p.wmu.Lock()
	p.rec.add("sent", frame)
	var m struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(frame, &m) == nil && m.Method != "" {
		p.lastSent = m.Method
	}
	_, err := p.stdin.Write(append(frame, '\n'))
	p.wmu.Unlock()
	if err != nil {
		if state, died := p.lost(); died {
			return fmt.Errorf("%w: its process exited (%s)", err, state)
		}
	}
	return err
}

// id allocates a request id.
func (p *stdioPeer) id() int64 {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.next++
	return p.next
}

// request sends a request in the peer's era and returns its id.
func (p *stdioPeer) request(method string, members map[string]any, token string) (int64, error) {
	id := p.id()
	return id, p.write(requestFrame(id, method, params(p.era, members, token, nil)))
}

// call sends a request and waits for its response.
func (p *stdioPeer) call(ctx context.Context, method string, members map[string]any, timeout time.Duration) (inbound, error) {
	from := p.box.count()
	id, err := p.request(method, members, "")
	if err != nil {
		return inbound{}, err
	}
	m, _, ok := p.box.wait(ctx, from, timeout, func(m inbound) bool { return m.isResponseTo(id) })
	if !ok {
		return inbound{}, p.silent(method, timeout)
	}
	return m, nil
}

// silent is the error of a request the server did not answer.
func (p *stdioPeer) silent(method string, timeout time.Duration) error {
	if err := p.box.endedWith(); err != nil {
		return fmt.Errorf("the server's output ended before it answered %s (%v)%s", method, err, p.stderrNote())
	}
	return fmt.Errorf("the server did not answer %s within %v", method, timeout)
}

func (p *stdioPeer) stderrNote() string {
	if s := p.stderr.String(); s != "" {
		return "; it wrote on stderr: " + lastLines(s, 3)
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// handshake makes the 2025 era's initialize exchange.
func (p *stdioPeer) handshake(ctx context.Context, timeout time.Duration) error {
	m, err := p.call(ctx, mcp.MethodInitialize, initializeParams(), timeout)
	if err != nil {
		return err
	}
	if m.msg.Error != nil {
		return fmt.Errorf("the server refused initialize: %s", m.msg.Error.Message)
	}
	return p.write(requestFrame(-1, mcp.NotificationInitialized, nil))
}

func initializeParams() map[string]any {
	return map[string]any{"protocolVersion": mcp.Version20251125, "capabilities": map[string]any{}, "clientInfo": clientInfo}
}

// notify sends a notification.
func (p *stdioPeer) notify(method string, params any) error {
	return p.write(requestFrame(-1, method, params))
}

// rss is the process's resident memory, in bytes, from /proc; false
// where that cannot be read.
func (p *stdioPeer) rss() (int64, bool) {
	if p.cmd.Process == nil {
		return 0, false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// close ends the process: its stdin closed, then a kill after exitWait.
func (p *stdioPeer) close() {
	p.resume()
	p.closing.Store(true)
	p.stdin.Close()
	go p.reap()
	select {
	case <-p.reaped:
	case <-time.After(exitWait):
		p.cmd.Process.Kill()
		<-p.reaped
	}
}

// errorText is a JSON-RPC error's code and message, for a report.
func errorText(e *jsonrpc.Error) string {
	if e == nil {
		return ""
	}
	return fmt.Sprintf("%d %s", e.Code, e.Message)
}

// errNoResponse is what a fixture tells when a response it needed never
// came.
var errNoResponse = errors.New("no response")
