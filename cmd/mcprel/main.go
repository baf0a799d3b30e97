// Command mcprel runs the mcprel MCP runtime.
//
//	mcprel serve --stdio      serve the demo tools over stdin/stdout
//	mcprel serve --http ADDR  serve them over Streamable HTTP
//	mcprel demo               drive a served process through a scripted exchange
//	mcprel ledger show        print the ledger's record of one operation
//	mcprel version            print the version
//
// Run "mcprel <command> -h" for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// version is the mcprel release this binary reports.
const version = "0.1.0"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serveCmd(ctx, args[1:], stdin, stdout, stderr)
	case "demo":
		err = demoCmd(ctx, args[1:], stdout, stderr)
	case "ledger":
		err = ledgerCmd(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "mcprel", version)
	case "help", "-h", "--help":
		usage(stdout)
	default:
		fmt.Fprintf(stderr, "mcprel: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errNotFound):
		return 3
	}
	fmt.Fprintln(stderr, "mcprel:", err)
	return 1
}

var errUsage = errors.New("usage")

func usage(w io.Writer) {
	fmt.Fprint(w, `mcprel: a reliability-first MCP runtime

Commands:
  serve --stdio     serve the demo tools over stdin/stdout (ledger in ./mcprel.db)
  serve --http ADDR serve them over Streamable HTTP
  ledger show       print the ledger's record of one operation
  demo              run a scripted exchange against "mcprel serve --stdio"
  version           print the version

Run "mcprel <command> -h" for a command's flags.
`)
}

// newLogger returns the request logger: text or JSON lines on w (stderr).
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
}
