package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// PprofAddrEnv names orderd's opt-in profiling endpoint. When it is set to a
// loopback host:port (127.0.0.1:0 picks a free port), orderd serves
// net/http/pprof under /debug/pprof/ on a listener of its own, apart from the
// API and without authentication, and prints
//
//	orderd: pprof on http://127.0.0.1:PORT/debug/pprof/
//
// to stderr. A CPU profile of the next N seconds is then
//
//	go tool pprof -top http://127.0.0.1:PORT/debug/pprof/profile?seconds=N
//
// Unset (the default), nothing is served. bench/run.sh uses it for PROFILE=1.
const PprofAddrEnv = "ORDERD_PPROF_ADDR"

// The endpoint starts from init so that it needs no wiring in main: it is a
// diagnostic switch, not configuration, and ParseConfig ignores it.
func init() {
	addr := os.Getenv(PprofAddrEnv)
	if addr == "" {
		return
	}
	ln, err := listenPprof(addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orderd: %s: %v\n", PprofAddrEnv, err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "orderd: pprof on http://%s/debug/pprof/\n", ln.Addr())
	srv := &http.Server{Handler: pprofMux(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
}

// listenPprof listens on addr, which must name a loopback host: profiles
// show the program's internals and are served without authentication.
func listenPprof(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, errors.New("must be a loopback address such as 127.0.0.1:6060")
	}
	return new(net.ListenConfig).Listen(context.Background(), "tcp", addr)
}

// pprofMux serves the net/http/pprof handlers (handlePprof: cmdline
// excluded) on a mux of its own.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	handlePprof(mux)
	return mux
}
