package client

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
)

// Server-sent events, as both HTTP transports read them: a Streamable
// HTTP response or session stream, and the one stream of the 2024-11-05
// HTTP+SSE transport.

// sseCursor is where a stream stood when it ended: the last event id
// the server gave, and the reconnection delay it asked for.
type sseCursor struct {
	lastID string
	retry  time.Duration // 0: the server gave none
}

// sseEvent is one event of a stream.
type sseEvent struct {
	name string // its event field; "" is a message
	data []byte
	// tooLarge is set when the event's data ran past the message limit
	// and was dropped unread: it holds what could be read of the
	// message's id on the way.
	tooLarge *jsonrpc.IDScanner
}

// sseLineSlack is what a data line may hold beyond the message itself:
// its "data: " field name and line end.
const sseLineSlack = 16

// sseReaders keeps the 64 KiB read buffers of ended streams: a call
// answered with an event stream (every 2025-era call mcprel serves over
// HTTP) would otherwise allocate and clear one per call.
var sseReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// readSSE reads the events of body, each message at most max bytes, and
// hands each to on until on reports true or the stream ends; it records
// the stream's cursor. It reports whether on reported true. An event
// past the limit is never held whole: on receives it with tooLarge set.
func readSSE(body io.Reader, max int, cursor *sseCursor, on func(sseEvent) bool) bool {
	r := sseReaders.Get().(*bufio.Reader)
	r.Reset(body)
	defer func() {
		r.Reset(nil) // nothing read here outlives the call: lines are copied out
		sseReaders.Put(r)
	}()
	var ev sseEvent
	dispatch := func() bool {
		e := ev
		ev = sseEvent{}
		return (len(e.data) > 0 || e.tooLarge != nil) && on(e)
	}
	for {
		scan := &jsonrpc.IDScanner{}
		raw, err := readLine(r, max+sseLineSlack, scan)
		line := bytes.TrimRight(raw, "\r\n")
		switch {
		case raw == nil && err == nil:
			// A line past the limit, consumed without being kept.
			if ev.tooLarge == nil {
				ev.tooLarge = scan
			}
			ev.data = nil
		case len(line) == 0 && err == nil:
			if dispatch() {
				return true
			}
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			switch {
			case ev.tooLarge != nil:
				ev.tooLarge.Write(d)
			case len(ev.data)+1+len(d) > max && len(ev.data) > 0 || len(d) > max:
				// Its lines together run past the limit.
				ev.tooLarge = &jsonrpc.IDScanner{}
				ev.tooLarge.Write(ev.data)
				ev.tooLarge.Write(d)
				ev.data = nil
			case ev.data != nil:
				ev.data = append(append(ev.data, '\n'), d...)
			default:
				ev.data = append([]byte{}, d...)
			}
		case bytes.HasPrefix(line, []byte("event:")):
			ev.name = string(bytes.TrimSpace(bytes.TrimPrefix(line, []byte("event:"))))
		case bytes.HasPrefix(line, []byte("id:")):
			cursor.lastID = string(bytes.TrimSpace(bytes.TrimPrefix(line, []byte("id:"))))
		case bytes.HasPrefix(line, []byte("retry:")):
			if ms, perr := strconv.Atoi(string(bytes.TrimSpace(bytes.TrimPrefix(line, []byte("retry:"))))); perr == nil && ms >= 0 {
				cursor.retry = min(time.Duration(ms)*time.Millisecond, maxServerRetry)
			}
		}
		if err != nil {
			return dispatch()
		}
	}
}

// maxServerRetry caps the reconnection delay a server may ask for.
const maxServerRetry = time.Minute

// ResponseTooLargeError ends a call whose response ran past
// Options.MaxMessageBytes: the client dropped it unread. The server did
// answer, so it may well have acted on the call.
type ResponseTooLargeError struct {
	Limit int // Options.MaxMessageBytes
}

func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("client: the server's response ran past %d bytes (Options.MaxMessageBytes) and was dropped unread", e.Limit)
}

// tooLargeResponse is the id of the response an event past the limit
// held, when what was read of it says so.
func tooLargeResponse(scan *jsonrpc.IDScanner) (jsonrpc.ID, bool) {
	if scan.Kind() != jsonrpc.KindResponse {
		return jsonrpc.ID{}, false
	}
	return scan.ID()
}
