package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/logbuf"
	"github.com/mcprel/mcprel/mcp"
)

// A call's arguments (a file's contents, a message's text) are the
// caller's data, not the operator's: the request line holds them only
// when the logger is at debug, through slog's handlers and logbuf's alike.
func TestRequestLineArgumentsAtDebugOnly(t *testing.T) {
	rec := RequestRecord{ID: jsonrpc.IntID(1), Method: mcp.MethodToolsCall, Tool: "write_file", Era: mcp.Modern, Transport: "stdio",
		Outcome: Completed, Start: time.Now(), Duration: time.Millisecond, args: []byte(`{"path":"notes.txt","content":"the file's contents"}`)}
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		handlers := map[string]func(*bytes.Buffer) (slog.Handler, func()){
			"slog": func(b *bytes.Buffer) (slog.Handler, func()) {
				return slog.NewTextHandler(b, &slog.HandlerOptions{Level: level}), func() {}
			},
			"logbuf": func(b *bytes.Buffer) (slog.Handler, func()) {
				w := logbuf.New(b, nil)
				return logbuf.Handler(logbuf.NewTextHandler(w, &slog.HandlerOptions{Level: level}), w), func() { w.Close() }
			},
		}
		for name, mk := range handlers {
			var b bytes.Buffer
			h, flush := mk(&b)
			s := &Server{log: slog.New(h)}
			s.report(context.Background(), rec)
			flush()
			line := b.String()
			if !strings.Contains(line, "tool=write_file") {
				t.Fatalf("%s at %v: no request line: %q", name, level, line)
			}
			if has := strings.Contains(line, "args="); has != (level == slog.LevelDebug) {
				t.Errorf("%s at %v: the request line %q; want the arguments only at debug", name, level, line)
			}
		}
	}
}
