package streamhttp

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
)

// eventLog keeps what the 2025-era SSE streams of every legacy session
// carried, or still have to carry, so that a client whose connection
// dropped can GET the endpoint with Last-Event-ID and receive what it
// missed (see ResumeOptions for the rules and the bounds).
//
// One lock guards the whole log: the bounds are server-wide, and every
// operation under it is short (a stream holds at most MaxEventsPerStream
// entries).
type eventLog struct {
	opts      ResumeOptions
	perTenant int64
	logger    *slog.Logger

	mu      sync.Mutex
	all     usage // the server's
	tenants map[string]*usage
	stats   ResumeStats // the cumulative counters; the gauges come from all
	notes   []note      // log lines to write once the lock is released

	drained func() // tests: told when a drainer has moved its stream's last message
}

// usage is what one scope (a session, a tenant, the server) holds.
type usage struct {
	bytes     int64     // every event kept
	repl      int64     // the replaceable ones: progress and other notifications
	doneBytes int64     // those of done streams, which may be evicted
	events    int       // events kept
	streams   int       // streams with a log
	done      list.List // done streams, oldest first
}

// Indexes of a stream's scopes.
const (
	scopeSession = iota
	scopeTenant
	scopeServer
	scopes
)

// sessionLog is one legacy session's part of the log.
type sessionLog struct {
	name    string // the session's log name, as in conn.Config.Name
	tenant  string
	notify  conn.Session // where the GET stream's outbound queue is installed
	use     usage
	streams map[string]*stream // by key
	get     *stream            // the GET stream, if one is kept
	closed  bool
}

// stream is the log of one SSE stream: a POST's response stream or the
// session's GET stream. Its events are numbered from 1 in the order they
// were produced; the event id "<key>-<n>" names the stream and the number.
//
// A stream is open until its source ends: the request's response is
// appended (or the request ends without one, as when it is cancelled), or
// the GET stream's session ends. While a connection is attached, that
// connection's writer moves the source's messages into the log and writes
// them; once the original connection is gone a drainer goroutine moves
// them, and any resumed connection follows the log. A stream is done once
// its response has been written on a connection (only the response is kept
// then, for a client that lost it in flight) or the request ended without
// one; done streams are the first to be evicted.
type stream struct {
	key    string
	sess   *sessionLog
	scopes [scopes]*usage
	reqID  jsonrpc.ID // the POST's request; zero for the GET stream
	method string
	isGet  bool
	out    *outbound.Queue // the source, until it ends

	entries   []entry // kept events, by number
	bytes     int64
	repl      int64 // bytes of the replaceable entries
	replCount int
	next      uint64 // the last number given out
	// gap is the number of the last event a resumer can no longer get
	// (shed, never kept for lack of room, or trimmed once the response was
	// delivered); 0 if none. Progress replaced by newer progress or by the
	// response is not a gap: what replaced it says more.
	gap uint64

	ended    bool // the source ended
	done     bool
	gone     bool // dropped from the log
	draining bool // a drainer goroutine owns the source
	conn     *attachment
	wake     chan struct{} // closed on the next change, for followers
	timer    *time.Timer
	timerGen uint64
	doneElem [scopes]*list.Element
}

// entry is one kept event.
type entry struct {
	seq  uint64
	kind outbound.Kind
	data []byte
}

func (e entry) replaceable() bool {
	return e.kind == outbound.Progress || e.kind == outbound.Droppable
}

// attachment is one connection writing a stream. A newer connection to the
// same stream displaces it.
type attachment struct{ displaced chan struct{} }

// note is a log line held until the log's lock is released.
type note struct {
	level slog.Level
	msg   string
	args  []any
}

func newEventLog(opts ResumeOptions, perTenant int64, logger *slog.Logger) *eventLog {
	return &eventLog{opts: opts, perTenant: perTenant, logger: logger, tenants: make(map[string]*usage)}
}

// unlock releases the lock and then writes the log lines noted under it.
func (l *eventLog) unlock() {
	notes := l.notes
	l.notes = nil
	l.mu.Unlock()
	for _, n := range notes {
		l.logger.Log(context.Background(), n.level, n.msg, n.args...)
	}
}

func (l *eventLog) noteLocked(level slog.Level, msg string, s *stream, args ...any) {
	args = append(args, "session", s.sess.name, "event_stream", s.key)
	if !s.isGet {
		args = append(args, "id", s.reqID, "method", s.method)
	}
	l.notes = append(l.notes, note{level: level, msg: msg, args: args})
}

// bound returns the byte bound of scope i.
func (l *eventLog) bound(i int) int64 {
	switch i {
	case scopeSession:
		return l.opts.MaxBytesPerSession
	case scopeTenant:
		return l.perTenant
	}
	return l.opts.MaxBytes
}

// session starts the log of a legacy session.
func (l *eventLog) session(name, tenant string, notify conn.Session) *sessionLog {
	return &sessionLog{name: name, tenant: tenant, notify: notify, streams: make(map[string]*stream)}
}

// newStreamLocked starts the log of a stream of sl and attaches the
// connection that opens it.
func (l *eventLog) newStreamLocked(sl *sessionLog, out *outbound.Queue) (*stream, *attachment) {
	ten := l.tenants[sl.tenant]
	if ten == nil {
		ten = new(usage)
		l.tenants[sl.tenant] = ten
	}
	s := &stream{sess: sl, out: out, scopes: [scopes]*usage{&sl.use, ten, &l.all}}
	for {
		var b [8]byte
		rand.Read(b[:])
		s.key = hex.EncodeToString(b[:])
		if sl.streams[s.key] == nil {
			break
		}
	}
	sl.streams[s.key] = s
	for _, u := range s.scopes {
		u.streams++
	}
	return s, l.attachLocked(s)
}

// open starts the log of a POST's response stream, or returns nil when the
// session holds MaxStreamsPerSession streams none of which is done: the
// stream is then served without event ids, as one that cannot be resumed.
func (l *eventLog) open(sl *sessionLog, out *outbound.Queue, id jsonrpc.ID, method string) (*stream, *attachment) {
	l.mu.Lock()
	defer l.unlock()
	if sl.closed {
		return nil, nil
	}
	posts := len(sl.streams)
	if sl.get != nil {
		posts-- // the GET stream does not count
	}
	if posts >= l.opts.MaxStreamsPerSession {
		if sl.use.done.Len() == 0 {
			l.stats.Unresumable++
			return nil, nil
		}
		l.removeLocked(sl.use.done.Front().Value.(*stream))
	}
	s, c := l.newStreamLocked(sl, out)
	s.reqID, s.method = id, method
	return s, c
}

// openGet starts the log of the session's GET stream, installs out as the
// session's outbound queue for notifications not tied to a request, and attaches
// the connection. A GET stream kept from an earlier connection that no
// client resumed is replaced. busy reports a GET stream with a connection
// attached: a session has one GET stream at a time.
func (l *eventLog) openGet(sl *sessionLog, out *outbound.Queue) (s *stream, c *attachment, busy bool) {
	l.mu.Lock()
	defer l.unlock()
	if sl.closed {
		return nil, nil, false
	}
	if g := sl.get; g != nil {
		if g.conn != nil {
			return nil, nil, true
		}
		l.removeLocked(g)
	}
	s, c = l.newStreamLocked(sl, out)
	s.isGet = true
	sl.get = s
	sl.notify.SetNotifyQueue(out)
	return s, c, false
}

func (l *eventLog) attachLocked(s *stream) *attachment {
	if s.conn != nil {
		close(s.conn.displaced)
	}
	c := &attachment{displaced: make(chan struct{})}
	s.conn = c
	if !s.done {
		l.disarmLocked(s) // an open stream with a reader does not expire
	}
	return c
}

// detach ends connection c's attachment to s. When out is the stream's
// source, c's writer was draining it; if the source has not ended, a
// drainer goroutine takes over, so that what the request still sends is
// kept for a resume.
func (l *eventLog) detach(s *stream, c *attachment, out *outbound.Queue) {
	l.mu.Lock()
	defer l.unlock()
	if s.conn == c {
		s.conn = nil
		if !s.gone && !s.done {
			l.armLocked(s)
		}
	}
	if out != nil && !s.ended && !s.gone && !s.draining {
		s.draining = true
		go l.drain(s, out)
	}
}

// drain moves what the source of a stream with no writer still produces
// into the log, until the source ends or the stream is dropped (which
// closes the source).
func (l *eventLog) drain(s *stream, out *outbound.Queue) {
	if l.drained != nil {
		defer l.drained()
	}
	for {
		if f, ok := out.TryNext(); ok {
			l.append(s, f)
			if f.Kind == outbound.Final {
				return
			}
			continue
		}
		if out.Closed() {
			l.endNoFinal(s)
			return
		}
		<-out.Ready()
	}
}

// append gives the next message of s its number and keeps it if the rules
// and bounds allow. The number is returned either way: the message is
// written on the stream's connection, if one is attached, with that id.
func (l *eventLog) append(s *stream, f outbound.Frame) uint64 {
	l.mu.Lock()
	defer l.unlock()
	s.next++
	e := entry{seq: s.next, kind: f.Kind, data: f.Data}
	if f.Kind == outbound.Final {
		s.ended, s.out = true, nil
	}
	if s.gone {
		return e.seq
	}
	switch {
	case e.replaceable():
		l.keepReplaceableLocked(s, e)
	case f.Kind == outbound.Final:
		l.keepFinalLocked(s, e)
	default: // FrameEssential: a request to the client, say
		if !l.keepFixedLocked(s, e) {
			s.gap = e.seq
			l.noteLocked(slog.LevelWarn, "a server-to-client message did not fit the resumption log; a client that resumes from before it will not get it",
				s, "bytes", len(e.data))
		}
	}
	l.wakeLocked(s)
	return e.seq
}

// keepReplaceableLocked keeps a progress or other droppable notification.
// A newer progress replaces the stream's older one. Replaceable events take
// at most half of every byte bound, so that they never take the room
// responses need; past that (or past the stream's event count) the
// stream's own oldest replaceable events are shed to make room, and when
// even that cannot make room the event is not kept.
func (l *eventLog) keepReplaceableLocked(s *stream, e entry) {
	if e.kind == outbound.Progress {
		if i := slices.IndexFunc(s.entries, func(x entry) bool { return x.kind == outbound.Progress }); i >= 0 {
			l.removeEntryLocked(s, i, false)
			l.stats.Coalesced++
		}
	}
	n := int64(len(e.data))
	// Would it fit if the stream's own replaceable events were shed?
	fixed := len(s.entries) - s.replCount
	feasible := fixed+1 < l.opts.MaxEventsPerStream &&
		n <= l.opts.MaxBytesPerStream/2 && s.bytes-s.repl+n <= l.opts.MaxBytesPerStream
	for i, u := range s.scopes {
		feasible = feasible && u.repl-s.repl+n <= l.bound(i)/2 && u.bytes-s.repl+n <= l.bound(i)
	}
	if !feasible {
		s.gap = e.seq
		l.stats.Shed++
		return
	}
	for !l.fitsLocked(s, n, true) || len(s.entries)+1 >= l.opts.MaxEventsPerStream {
		l.shedLocked(s, false)
		l.stats.Shed++
	}
	l.insertLocked(s, e)
}

// keepFixedLocked keeps an event that is never shed once kept (a response,
// a request to the client), making room by shedding the stream's own
// replaceable events and then by evicting done streams, oldest first.
// Open streams of others are never touched: first come, first kept.
func (l *eventLog) keepFixedLocked(s *stream, e entry) bool {
	n := int64(len(e.data))
	if e.kind != outbound.Final && len(s.entries)-s.replCount+1 >= l.opts.MaxEventsPerStream {
		return false // the last slot is the response's
	}
	if s.bytes-s.repl+n > l.opts.MaxBytesPerStream {
		return false
	}
	for i, u := range s.scopes {
		if u.bytes-s.repl-u.doneBytes+n > l.bound(i) {
			return false
		}
	}
	for !l.fitsLocked(s, n, false) || (e.kind != outbound.Final && len(s.entries)+1 >= l.opts.MaxEventsPerStream) {
		if s.replCount > 0 {
			l.shedLocked(s, e.kind == outbound.Final)
			continue
		}
		evicted := false
		for i, u := range s.scopes {
			if u.bytes+n > l.bound(i) && u.done.Len() > 0 {
				l.removeLocked(u.done.Front().Value.(*stream))
				evicted = true
				break
			}
		}
		if !evicted {
			return false // cannot happen: the feasibility check above
		}
	}
	l.insertLocked(s, e)
	return true
}

// keepFinalLocked keeps a response. One that cannot be kept is replaced by
// a small error response for the same request saying so; if even that
// cannot be kept, the stream is dropped, and a resume gets 400. Both are
// logged.
func (l *eventLog) keepFinalLocked(s *stream, e entry) {
	if l.keepFixedLocked(s, e) {
		return
	}
	small := notKeptError(s.reqID, len(e.data))
	if l.keepFixedLocked(s, entry{seq: e.seq, kind: outbound.Final, data: small}) {
		l.stats.Replaced++
		l.noteLocked(slog.LevelWarn, "a response did not fit the resumption log; a client that resumes its stream gets an error in its place",
			s, "bytes", len(e.data))
		return
	}
	l.stats.Lost++
	l.noteLocked(slog.LevelWarn, "a response did not fit the resumption log, nor an error in its place; a client that resumes its stream gets 400",
		s, "bytes", len(e.data))
	l.removeLocked(s)
}

// notKeptError is the response kept in place of one too large to keep.
func notKeptError(id jsonrpc.ID, size int) []byte {
	msg := fmt.Sprintf("the server answered this request, but its response (%d bytes) was too large for the resumption log and was not kept; find out what the request did before repeating it", size)
	data, _ := json.Marshal(mcp.Failure{Code: mcp.FailureInternal, Message: msg})
	return jsonrpc.AppendError(nil, id, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg, Data: data})
}

// fitsLocked reports whether n more bytes fit every bound of s; a
// replaceable event must also fit in half of each.
func (l *eventLog) fitsLocked(s *stream, n int64, repl bool) bool {
	if s.bytes+n > l.opts.MaxBytesPerStream || (repl && s.repl+n > l.opts.MaxBytesPerStream/2) {
		return false
	}
	for i, u := range s.scopes {
		if u.bytes+n > l.bound(i) || (repl && u.repl+n > l.bound(i)/2) {
			return false
		}
	}
	return true
}

// shedLocked drops the stream's oldest replaceable entry, its progress
// first. forFinal says a response is being made room for: progress it
// replaces is no gap.
func (l *eventLog) shedLocked(s *stream, forFinal bool) {
	i := slices.IndexFunc(s.entries, func(x entry) bool { return x.kind == outbound.Progress })
	if i < 0 {
		i = slices.IndexFunc(s.entries, entry.replaceable)
	}
	gap := !(forFinal && s.entries[i].kind == outbound.Progress)
	l.removeEntryLocked(s, i, gap)
}

func (l *eventLog) insertLocked(s *stream, e entry) {
	n := int64(len(e.data))
	s.entries = append(s.entries, e)
	s.bytes += n
	if e.replaceable() {
		s.repl += n
		s.replCount++
	}
	for _, u := range s.scopes {
		u.bytes += n
		u.events++
		if e.replaceable() {
			u.repl += n
		}
	}
}

func (l *eventLog) removeEntryLocked(s *stream, i int, gap bool) {
	e := s.entries[i]
	s.entries = slices.Delete(s.entries, i, i+1)
	n := int64(len(e.data))
	s.bytes -= n
	if e.replaceable() {
		s.repl -= n
		s.replCount--
	}
	for _, u := range s.scopes {
		u.bytes -= n
		u.events--
		if e.replaceable() {
			u.repl -= n
		}
	}
	if gap {
		s.gap = max(s.gap, e.seq)
	}
}

// delivered records that the stream's response was written (and flushed)
// on a connection: the stream is done, and only the response is kept.
func (l *eventLog) delivered(s *stream) {
	l.mu.Lock()
	defer l.unlock()
	if s.gone || s.done {
		return
	}
	for i := len(s.entries) - 1; i >= 0; i-- {
		if k := s.entries[i].kind; k != outbound.Final {
			l.removeEntryLocked(s, i, k != outbound.Progress)
		}
	}
	l.doneLocked(s)
}

// endNoFinal records that the stream's source ended without a response:
// the request was cancelled, or its session ended. Nothing of it is
// replayed after that (no progress after a terminal state); the stream
// stays known, empty and done, so that a resume is told it ended.
func (l *eventLog) endNoFinal(s *stream) {
	l.mu.Lock()
	defer l.unlock()
	if s.gone || s.ended {
		return
	}
	s.ended, s.out = true, nil
	for i := len(s.entries) - 1; i >= 0; i-- {
		l.removeEntryLocked(s, i, false)
	}
	l.doneLocked(s)
	l.wakeLocked(s)
}

func (l *eventLog) doneLocked(s *stream) {
	s.done = true
	for i, u := range s.scopes {
		s.doneElem[i] = u.done.PushBack(s)
		u.doneBytes += s.bytes
	}
	l.armLocked(s)
}

// armLocked starts the stream's TTL: it is dropped when the TTL passes
// without a connection attaching (or, once done, in any case).
func (l *eventLog) armLocked(s *stream) {
	l.disarmLocked(s)
	gen := s.timerGen
	s.timer = time.AfterFunc(l.opts.TTL, func() { l.expire(s, gen) })
}

func (l *eventLog) disarmLocked(s *stream) {
	s.timerGen++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

func (l *eventLog) expire(s *stream, gen uint64) {
	l.mu.Lock()
	defer l.unlock()
	if s.gone || s.timerGen != gen {
		return
	}
	switch {
	case s.isGet && !s.ended:
		l.noteLocked(slog.LevelDebug, "a GET stream was not resumed within the resumption TTL; its log is dropped", s)
	case !s.ended:
		l.stats.Expired++
		l.noteLocked(slog.LevelWarn, "a stream was not resumed within the resumption TTL; its log is dropped, and its response, when the call ends, cannot reach its client",
			s, "ttl", l.opts.TTL)
	case !s.done:
		l.stats.Expired++
		l.noteLocked(slog.LevelWarn, "a response was kept for the resumption TTL and its client never came back for it; it is dropped",
			s, "ttl", l.opts.TTL)
	}
	l.removeLocked(s)
}

// removeLocked drops a stream from the log. A source that has not ended
// is closed: what its request still sends goes nowhere.
func (l *eventLog) removeLocked(s *stream) {
	if s.gone {
		return
	}
	s.gone = true
	for i, u := range s.scopes {
		u.bytes -= s.bytes
		u.repl -= s.repl
		u.events -= len(s.entries)
		u.streams--
		if s.done {
			u.doneBytes -= s.bytes
			u.done.Remove(s.doneElem[i])
			s.doneElem[i] = nil
		}
	}
	if ten := s.scopes[scopeTenant]; ten.streams == 0 {
		delete(l.tenants, s.sess.tenant)
	}
	s.entries, s.bytes, s.repl, s.replCount = nil, 0, 0, 0
	delete(s.sess.streams, s.key)
	if s.sess.get == s {
		s.sess.get = nil
		s.sess.notify.SetNotifyQueue(nil)
	}
	l.disarmLocked(s)
	if s.out != nil {
		s.out.Close()
		s.out = nil
	}
	l.wakeLocked(s)
}

// dropSession drops every stream of a session that ended.
func (l *eventLog) dropSession(sl *sessionLog) {
	l.mu.Lock()
	defer l.unlock()
	sl.closed = true
	for _, s := range sl.streams {
		if s.ended && !s.done {
			l.noteLocked(slog.LevelInfo, "a session ended while the resumption log held a response its client never came back for", s)
		}
		l.removeLocked(s)
	}
}

func (l *eventLog) wakeLocked(s *stream) {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// Why a Last-Event-ID cannot be resumed.
var (
	errUnknownEvent = errors.New("names no stream of this session that can be resumed: it is unknown, or its stream's log expired or was dropped")
	errStreamEnded  = errors.New("is the last event of a stream that has ended: nothing follows it")
)

// resume finds the stream a Last-Event-ID of session sl names and attaches
// a connection to it (displacing any other), returning the number after
// which to replay.
func (l *eventLog) resume(sl *sessionLog, lastID string) (*stream, uint64, *attachment, error) {
	key, num, ok := strings.Cut(lastID, "-")
	seq, err := strconv.ParseUint(num, 10, 64)
	l.mu.Lock()
	defer l.unlock()
	s := sl.streams[key]
	if !ok || err != nil || s == nil || s.gone || seq > s.next {
		return nil, 0, nil, errUnknownEvent
	}
	if s.ended && !slices.ContainsFunc(s.entries, func(e entry) bool { return e.seq > seq }) {
		return nil, 0, nil, errStreamEnded
	}
	l.stats.Resumed++
	return s, seq, l.attachLocked(s), nil
}

// followState is what a follower needs to know of its stream besides the
// entries after its cursor.
type followState struct {
	wake  <-chan struct{} // closed on the next change
	ended bool
	gone  bool
	gap   uint64
}

// after appends to buf the kept entries of s numbered above cursor.
func (l *eventLog) after(s *stream, cursor uint64, buf []entry) ([]entry, followState) {
	l.mu.Lock()
	defer l.unlock()
	for _, e := range s.entries {
		if e.seq > cursor {
			buf = append(buf, e)
		}
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return buf, followState{wake: s.wake, ended: s.ended, gone: s.gone, gap: s.gap}
}

// snapshot returns the counters and what the log holds now.
func (l *eventLog) snapshot() ResumeStats {
	l.mu.Lock()
	defer l.unlock()
	st := l.stats
	st.Streams, st.Events, st.Bytes = l.all.streams, l.all.events, l.all.bytes
	return st
}
