package streamhttp

import (
	"cmp"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
)

// Defaults for ResumeOptions fields left at zero.
const (
	// DefaultResumeRetry is the SSE retry: value sent on 2025-era streams:
	// how long a client waits before it reconnects. The TypeScript SDK
	// uses it as given, and falls back to the same second without it.
	DefaultResumeRetry = time.Second
	// DefaultResumeTTL is how long a stream's log is kept once no
	// connection reads it: ample for a client that reconnects after
	// DefaultResumeRetry, or after a few attempts with backoff.
	DefaultResumeTTL = 2 * time.Minute
	// DefaultResumeEventsPerStream bounds the events kept per stream.
	DefaultResumeEventsPerStream = 64
	// DefaultResumeBytesPerStream lets one stream keep a response as large
	// as the default message cap.
	DefaultResumeBytesPerStream = jsonrpc.DefaultMaxMessageBytes
	// DefaultResumeStreamsPerSession matches the server's default number
	// of concurrent calls.
	DefaultResumeStreamsPerSession = 64
	// DefaultResumeBytesPerSession is four streams' worth.
	DefaultResumeBytesPerSession = 4 * DefaultResumeBytesPerStream
	// DefaultResumeBytes bounds the log server-wide: sixteen streams'
	// worth, as much as server.DefaultMaxInflightBytes holds of requests.
	DefaultResumeBytes = 16 * DefaultResumeBytesPerStream
)

// ResumeOptions configure 2025-era stream resumption: event ids on the SSE
// streams of legacy sessions, and the bounded log that lets a client whose
// connection dropped GET the endpoint with Last-Event-ID and receive what it
// missed. The zero value turns it on with the defaults above. The 2026-07-28
// era has no resumption and is not affected.
//
// What is kept follows the outbound queue's rules. A progress notification
// replaces the stream's older one; progress and other notifications ("replaceable"
// events) take at most half of each byte bound and are shed, oldest first,
// when there is no room, which marks the stream so that a resumed response
// carries the refetch flag (mcp.MetaRefetch). A response is never shed:
// to keep one, the stream's own replaceable events are shed, then done
// streams (whose response was already written) are evicted, oldest first;
// other streams' undelivered events are never touched. A response that
// still cannot be kept — larger than MaxBytesPerStream, or with the other
// bounds full of undelivered responses — is replaced by an error response
// for the same request (JSON-RPC -32603, data.code "internal_error") that
// says so, and failing even that the stream is dropped; either is logged at
// warning level, so that no response is lost without a trace.
//
// Every bound holds at all times: memory is at most MaxBytes of event data
// (less per tenant, session and stream), plus a few hundred bytes of
// bookkeeping per stream, at most MaxStreamsPerSession+1 per session.
type ResumeOptions struct {
	// Disabled turns resumption off: no event ids, no log, and a dropped
	// stream's response cannot reach its client.
	Disabled bool
	// Retry is the SSE retry: value sent on the first event of every
	// 2025-era stream. Zero means DefaultResumeRetry.
	Retry time.Duration
	// TTL is how long a stream's log is kept once no connection reads it,
	// and how long a delivered response is kept for a client that lost it
	// in flight. A session's end drops its logs at once. Zero means
	// DefaultResumeTTL.
	TTL time.Duration
	// MaxEventsPerStream bounds the events kept per stream, the response
	// included (at least 2). Zero means DefaultResumeEventsPerStream.
	MaxEventsPerStream int
	// MaxBytesPerStream bounds the bytes kept per stream; a larger response
	// is replaced by the error above. Zero means DefaultResumeBytesPerStream.
	MaxBytesPerStream int64
	// MaxStreamsPerSession bounds the POST streams with a log per session
	// (the session's GET stream comes on top). Past it, the oldest done
	// stream is evicted, or if none is done the new stream is served
	// without event ids and cannot be resumed. Zero means
	// DefaultResumeStreamsPerSession.
	MaxStreamsPerSession int
	// MaxBytesPerSession bounds the bytes kept per session. Zero means
	// DefaultResumeBytesPerSession.
	MaxBytesPerSession int64
	// MaxBytesPerTenant bounds the bytes kept for one tenant's sessions
	// (see HandlerOptions.Tokens), so that one client cannot take the whole
	// log. Zero means a quarter of MaxBytes, at least MaxBytesPerSession;
	// without Tokens there is one tenant, whose share is MaxBytes.
	MaxBytesPerTenant int64
	// MaxBytes bounds the bytes kept server-wide. Zero means
	// DefaultResumeBytes.
	MaxBytes int64
}

func (o *ResumeOptions) normalize() error {
	if o.Retry < 0 || o.TTL < 0 || o.MaxEventsPerStream < 0 || o.MaxBytesPerStream < 0 || o.MaxStreamsPerSession < 0 ||
		o.MaxBytesPerSession < 0 || o.MaxBytesPerTenant < 0 || o.MaxBytes < 0 {
		return errors.New("streamhttp: ResumeOptions values must not be negative")
	}
	o.Retry = max(cmp.Or(o.Retry, DefaultResumeRetry), time.Millisecond)
	o.TTL = cmp.Or(o.TTL, DefaultResumeTTL)
	o.MaxEventsPerStream = max(cmp.Or(o.MaxEventsPerStream, DefaultResumeEventsPerStream), 2)
	o.MaxBytesPerStream = cmp.Or(o.MaxBytesPerStream, DefaultResumeBytesPerStream)
	o.MaxStreamsPerSession = cmp.Or(o.MaxStreamsPerSession, DefaultResumeStreamsPerSession)
	o.MaxBytesPerSession = cmp.Or(o.MaxBytesPerSession, DefaultResumeBytesPerSession)
	o.MaxBytes = cmp.Or(o.MaxBytes, DefaultResumeBytes)
	o.MaxBytesPerTenant = cmp.Or(o.MaxBytesPerTenant, max(o.MaxBytesPerSession, o.MaxBytes/4))
	return nil
}

// ResumeStats is what the resumption log holds and has done.
type ResumeStats struct {
	Streams int   // streams with a log now
	Events  int   // events kept now
	Bytes   int64 // bytes of the events kept now (their encoded JSON)

	Resumed     int64 // GETs with Last-Event-ID that resumed a stream
	Coalesced   int64 // progress notifications replaced by newer progress
	Shed        int64 // replaceable events shed, or not kept, for lack of room
	Replaced    int64 // responses kept as an error saying they did not fit
	Lost        int64 // responses that could not be kept at all
	Expired     int64 // streams dropped after the TTL with a response undelivered or still to come
	Unresumable int64 // streams served without event ids, the session holding MaxStreamsPerSession
}

// ResumeStats returns the resumption log's counters (zero when it is
// disabled).
func (h *Handler) ResumeStats() ResumeStats {
	if h.events == nil {
		return ResumeStats{}
	}
	return h.events.snapshot()
}

// resumable is what a writer needs to number the events of a stream it
// drains from its source, and keep them in the log.
type resumable struct {
	log   *eventLog
	s     *stream
	c     *attachment
	prime bool // open with a priming event
}

// primes reports whether a session's streams open with a priming event
// (an id and empty data, SEP-1699): from 2025-11-25 on. Clients of earlier
// revisions may choke on an event without data.
func primes(ss conn.Session) bool { return ss.Version() >= mcp.Version20251125 }

// appendEventID appends the id of event seq of the stream with key.
func appendEventID(b []byte, key string, seq uint64) []byte {
	b = append(b, key...)
	b = append(b, '-')
	return strconv.AppendUint(b, seq, 10)
}

// idEvent encodes a message as an SSE event with its id and, on a
// connection's first event, the retry: field.
func (h *Handler) idEvent(key string, seq uint64, data []byte, retry bool) []byte {
	ev := make([]byte, 0, len(data)+64)
	ev = append(ev, "event: message\nid: "...)
	ev = appendEventID(ev, key, seq)
	ev = append(ev, '\n')
	if retry {
		ev = h.appendRetry(ev)
	}
	ev = append(ev, "data: "...)
	ev = append(ev, data...)
	return append(ev, "\n\n"...)
}

// primingEvent is a new stream's first event: its id (number 0, before
// every message), the retry: field, and no data.
func (h *Handler) primingEvent(key string) []byte {
	ev := append([]byte("id: "), key...)
	ev = append(ev, "-0\n"...)
	ev = h.appendRetry(ev)
	return append(ev, "data:\n\n"...)
}

func (h *Handler) appendRetry(b []byte) []byte {
	b = append(b, "retry: "...)
	b = strconv.AppendInt(b, h.opts.Resume.Retry.Milliseconds(), 10)
	return append(b, '\n')
}

// startSSE writes the headers of an SSE response and flushes them with
// first, if any.
func (h *Handler) startSSE(w http.ResponseWriter, rc *http.ResponseController, first []byte) bool {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache, no-transform")
	hdr.Set("X-Accel-Buffering", "no")
	rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	w.WriteHeader(http.StatusOK)
	if first != nil {
		if _, err := w.Write(first); err != nil {
			return false
		}
	}
	return rc.Flush() == nil
}

// resume serves a GET with Last-Event-ID: the stream that id belongs to,
// from the event after it. An id this session cannot resume gets 400 with a
// JSON-RPC error, not 404: with an Mcp-Session-Id, 404 tells a 2025 client
// that its session is gone and it must initialize again, which would throw
// away a session that is still there.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, ls *legacySession, lastID string) {
	s, cursor, c, err := h.events.resume(ls.log, lastID)
	if err != nil {
		if len(lastID) > 64 {
			lastID = lastID[:64] + "…"
		}
		writeError(w, http.StatusBadRequest, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "%s %q %v", mcp.HeaderLastEventID, lastID, err))
		return
	}
	rc := http.NewResponseController(w)
	st := h.follow(w, r, rc, s, c, cursor)
	h.events.detach(s, c, nil)
	args := []any{"session", ls.id[:8], "event_stream", s.key, "from", cursor, "frames", st.frames, "final", st.final, "end", st.end}
	if !s.isGet {
		args = append(args, "id", s.reqID, "method", s.method)
	}
	h.srv.Logger().Debug("resumed stream", args...)
}

// follow writes the kept events of s numbered above cursor, then what
// comes after them, until the stream's response is written, the stream
// ends, or another connection takes it over.
func (h *Handler) follow(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, s *stream, c *attachment, cursor uint64) streamStats {
	var st streamStats
	if !h.startSSE(w, rc, nil) {
		st.end = endWriteFailed
		return st
	}
	keepalive := time.NewTicker(h.opts.KeepAlive)
	defer keepalive.Stop()
	from, first := cursor, true
	var batch []entry
	for {
		var fs followState
		batch, fs = h.events.after(s, cursor, batch[:0])
		for _, e := range batch {
			data := e.data
			if e.kind == outbound.Final && fs.gap > from {
				// Something after the client's cursor is gone: what it
				// saw of the stream is incomplete.
				data = h.flagRefetch(data)
			}
			select {
			case <-c.displaced:
				st.end = endDisplaced
				return st
			default:
			}
			if !h.writeEvent(w, rc, h.idEvent(s.key, e.seq, data, first)) {
				st.end = endWriteFailed
				return st
			}
			first, cursor = false, e.seq
			st.frames++
			keepalive.Reset(h.opts.KeepAlive)
			if e.kind == outbound.Final {
				h.events.delivered(s)
				st.final, st.end = true, endComplete
				return st
			}
		}
		if len(batch) > 0 {
			continue
		}
		if fs.gone || fs.ended {
			st.end = endCancelled
			return st
		}
		select {
		case <-fs.wake:
		case <-keepalive.C:
			if !h.writeKeepalive(w, rc) {
				st.end = endWriteFailed
				return st
			}
		case <-r.Context().Done():
			st.end = endClientClosed
			return st
		case <-c.displaced:
			st.end = endDisplaced
			return st
		}
	}
}

// refetchFlagged is the response with the refetch flag, or as it was when
// it carries no result to flag (ok false).
func refetchFlagged(data []byte) (flagged []byte, ok bool) {
	return outbound.WithRefetchFlag(data)
}

// flagRefetch is refetchFlagged, telling the observers of a flagged
// response.
func (h *Handler) flagRefetch(data []byte) []byte {
	flagged, ok := refetchFlagged(data)
	if ok {
		h.srv.ReportEvent(server.Event{Kind: server.EventRefetchFlagged, Transport: "http"})
	}
	return flagged
}
