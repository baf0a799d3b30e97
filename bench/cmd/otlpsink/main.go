// Command otlpsink is an OTLP/HTTP trace collector that keeps nothing: it
// answers every export at once, so that a benchmark of a traced server
// measures the server's cost of tracing and not a collector's.
//
//	otlpsink -addr 127.0.0.1:4318
//
// On SIGINT or SIGTERM it prints how many exports and bytes it received.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4318", "where to listen")
	flag.Parse()
	var exports, bytes atomic.Int64
	http.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		exports.Add(1)
		bytes.Add(n)
		// An empty protobuf message is a successful ExportTraceServiceResponse.
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		<-sigs
		fmt.Printf("%d exports, %d bytes\n", exports.Load(), bytes.Load())
		os.Exit(0)
	}()
	log.Fatal(http.ListenAndServe(*addr, nil))
}
