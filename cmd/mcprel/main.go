// Command mcprel runs the mcprel MCP runtime.
//
//	mcprel serve --stdio      serve the demo tools over stdin/stdout
//	mcprel serve --http ADDR  serve them over Streamable HTTP
//	mcprel gateway --upstream NAME=COMMAND|NAME=URL  put any MCP server behind mcprel
//	mcprel gateway wrap FILE  put mcprel in front of every server of a client's config
//	mcprel gateway login NAME authorize the gateway to call an OAuth upstream
//	mcprel demo               run every race and failure against real servers and print the evidence
//	mcprel ledger list        list the operations waiting to be reconciled
//	mcprel ledger show        print the ledger's record of one operation
//	mcprel ledger resolve     close an operation whose outcome is unknown
//	mcprel call TOOL k=v...   call a tool on any MCP server (--stdio CMD or --url URL)
//	mcprel review POLICY      review MCP operations for reliability (or --from-server URL, --stdio CMD)
//	mcprel login URL          sign in to an HTTP server ahead of time (OAuth); logout URL forgets it
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

	"github.com/mcprel/mcprel/logbuf"
)

// version is the mcprel release this binary reports.
const version = "0.1.0"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "serve":
		err = serveCmd(ctx, args[1:], stdin, stdout, stderr)
	case "gateway":
		err = gatewayCmd(ctx, args[1:], stdin, stdout, stderr)
	case "demo":
		err = demoCmd(ctx, args[1:], stdout, stderr)
	case "ledger":
		err = ledgerCmd(ctx, args[1:], stdout, stderr)
	case "call":
		err = callCmd(ctx, args[1:], stdin, stdout, stderr)
	case "review":
		err = reviewCmd(ctx, args[1:], stdout, stderr)
	case "probe":
		err = probeCmd(ctx, args[1:], stdout, stderr)
	case "login":
		err = loginCmd(ctx, args[1:], stdout, stderr)
	case "logout":
		err = logoutCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-v", "-version":
		fmt.Fprintln(stdout, "mcprel", version)
	case "help", "-h", "--help", "-help": // isHelp
		usage(stdout)
	default:
		fmt.Fprintf(stderr, "mcprel: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	var ue usageError
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(stderr, "mcprel:", ee.msg)
		}
		return ee.code
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintln(stderr, "mcprel:", ue.msg)
		}
		return exitUsage
	case errors.Is(err, errNotFound):
		return exitNotFound
	}
	fmt.Fprintln(stderr, "mcprel:", err)
	return exitFailure
}

// Exit statuses, the same for every command.
const (
	exitFailure  = 1 // the command ran and failed
	exitUsage    = 2 // the command line is wrong: a flag, a value, an argument
	exitNotFound = 3 // ledger show: no record for this key
)

// usageError is a mistake in the command line. Its message names the flag
// as the user typed it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// usagef reports a command-line mistake: exit status 2.
func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "--help", "-help", "help":
		return true
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprint(w, `mcprel: a reliability-first MCP runtime

Commands:
  serve --stdio     serve the demo tools over stdin/stdout (ledger in ./mcprel.db)
  serve --http ADDR serve them over Streamable HTTP
  gateway --upstream NAME=COMMAND|NAME=URL [--stdio | --http ADDR]
                    put any MCP server behind mcprel: deadlines, cancellation,
                    progress, limits and honest failures for its tools
                    (--mcp-config FILE: every server of a client's config)
  gateway wrap FILE put mcprel in front of every server of a client's config
                    (--write to change it, keeping a backup; --undo restores it)
  gateway login NAME
                    authorize the gateway to call OAuth upstream NAME
  ledger list       list the operations whose outcome is unknown, and how to close them
  ledger show       print the ledger's record of one operation
  ledger resolve    close an operation whose outcome is unknown, after checking what it did
  call TOOL k=v...  call a tool on any MCP server (--stdio "CMD" or --url URL);
                    --list lists its tools
  review POLICY     review MCP operations for reliability (a YAML or JSON
                    policy, or --from-server URL / --stdio "CMD"); exit 20: refused
  probe --stdio "CMD" | --url URL [--policy FILE]
                    run the reliability fixtures live against any MCP server;
                    exit 21: a fixture failed
  login URL         sign in to an HTTP server with OAuth ahead of time; call,
                    probe and review sign in when a server asks, and reuse it
  logout URL        forget the tokens kept for that server
  demo              run every race and failure against real servers; print records (--json, or --wire for frames)
  version           print the version (also --version, -v)

Run "mcprel <command> -h" for a command's flags.
Exit status: 0 success, 1 failure, 2 a mistake in the command line,
3 "ledger show" or "ledger resolve" found no record; "mcprel call": 10 the tool reported a
failure, 11 a protocol error, 12 the idle deadline, 13 the maximum
deadline, 14 interrupted, 15 the server was overloaded, 16 no connection,
17 the outcome is unknown and the call unsafe to retry: reconcile first,
18 the server wants credentials: the sign-in failed or a token was refused.
`)
}

// newLogger returns the request logger: text or JSON lines on w (stderr,
// in batches), a warning or an error written at once.
func newLogger(w *logbuf.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level must be debug, info, warn or error, not %q", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(logbuf.Handler(logbuf.NewTextHandler(w, opts), w)), nil
	case "json":
		return slog.New(logbuf.Handler(slog.NewJSONHandler(w, opts), w)), nil
	}
	return nil, usagef("--log-format must be text or json, not %q", format)
}
