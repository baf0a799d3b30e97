// Package host assembles a whole mcprel runtime from one Options struct:
// the store (SQLite or PostgreSQL), the idempotency ledger and its reaper,
// the durable task store, runner and maintainer, the metrics and tracing
// observers, one transport (stdio or Streamable HTTP, with its tokens and
// tenants), an optional metrics listener, and the order in which all of it
// stops. Every handler it serves over HTTP (the endpoint, the metrics and
// the status page beside them (package status) on either listener,
// Options.Handlers) is wrapped in one place with the
// same middleware of package auth: the Host and Origin checks and the
// authenticator (static tokens, Options.HTTP.Authenticator, or the OAuth
// resource server of Options.OAuth, whose Protected Resource Metadata is
// served beside the endpoint to anyone). Commands are thin flag parsers
// over it: "mcprel serve" builds Options from its flags, registers its
// tools and runs.
//
//	rt, err := host.New(ctx, &host.Options{
//		Implementation: mcp.Implementation{Name: "inventory", Version: "1.0.0"},
//		DB:             "inventory.db",
//		Addr:           "127.0.0.1:8080",
//		ShutdownGrace:  10 * time.Second,
//	})
//	if err != nil {
//		return err
//	}
//	defer rt.Close() // releases what New opened if Run is never reached
//	if err := addTools(rt.Server(), rt.Ledger(), rt.Tasks()); err != nil {
//		return err
//	}
//	fmt.Fprintln(os.Stderr, rt.Endpoint())
//	return rt.Run(ctx)
//
// New opens and builds everything and binds the listeners, so that the
// endpoint's URL is known (and connections queue) before the caller
// registers its tools; Run starts the background work, serves, and stops.
//
// # Signals
//
// The package catches no signal: Run serves until its context ends, and
// treats that end as the request to shut down gracefully. A command passes
// a context from signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM),
// made before New so that a signal arriving once the endpoint is announced
// shuts the runtime down instead of killing the process; a test or a
// program hosting several runtimes cancels the context itself. To stop
// without waiting for running calls, set ShutdownGrace to zero.
//
// # Shutdown order
//
// When Run's context ends, the runtime stops in one order, each step
// after the previous one returned:
//
//  1. drain: the server stops taking requests (new ones are refused as
//     unavailable, 503 over HTTP) and calls in flight may finish within
//     ShutdownGrace; the rest are cancelled. Over HTTP the handler's
//     sessions and streams end with them.
//  2. close-transport: the HTTP listener and its idle connections close
//     (bounded by five seconds); over stdio, the connection ends.
//  3. upstreams: with the status page, this replica stops writing its
//     upstreams for the other replicas' pages and deletes its row, so
//     that they list it no more; then, with a Gateway, the connections to
//     the upstream servers close (a stdio upstream's stdin closes, then
//     SIGTERM, then SIGKILL), after every forwarded call has ended.
//  4. tasks: the task runner takes no more tasks, and running ones may
//     stop at their next checkpoint within ShutdownGrace (a second
//     grace, after the calls'), then are left for the next process to
//     take over when their lease expires; the maintainer stops.
//  5. outbox: with receivers (Outbox.Receivers), the outbox's dispatcher
//     stops claiming intents, and the deliveries in flight are recorded
//     (an intent it could not deliver stays pending, for the next
//     process: the receiver dedupes by its key).
//  6. metrics: the metrics listener closes.
//  7. reaper: the ledger's reaper stops.
//  8. store: the database closes, after everything that writes to it.
//  9. traces: spans still buffered are flushed (bounded by five seconds).
//
// Over stdio, a client that closes stdin ends the connection without
// step 1 (its calls are cancelled as the connection closes); the steps
// from 3 on follow. A failure of the HTTP server (its listener gone) runs
// every step: the calls on the connections it accepted still run, and
// drain before the store closes under them.
//
// Package host sits above the policies and observers and is imported only
// by commands, examples and tests.
package host
