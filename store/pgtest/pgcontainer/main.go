//go:build pgcontainer

// Command pgcontainer starts a PostgreSQL container with testcontainers-go
// for store/pgtest, prints its URL and keeps it until its standard input
// closes. pgtest runs it with `go run` only when no test server is given
// (ORDERLY_TEST_DATABASE_URL) and a Docker engine seems to be there, so
// testcontainers and the Docker client are compiled and linked into this
// one small program instead of into every test binary that uses
// PostgreSQL. It is built only with the build tag pgcontainer (`go run
// -tags pgcontainer`), so `go test ./...` and `go vet ./...` do not compile
// it either.
//
// Output on stdout, one line: URL=postgres://… on success or ERR=<reason>.
// The container is terminated when stdin reaches end of file (the test
// process exited); testcontainers' Ryuk reaper removes it too should this
// program be killed.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// image is the image started: PostgreSQL 16 on Alpine.
const image = "postgres:16-alpine"

func main() {
	url, stop, err := start()
	if err != nil {
		fmt.Printf("ERR=%v\n", err)
		os.Exit(1)
	}
	fmt.Printf("URL=%s\n", url)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test process goes away
	stop()
}

func start() (url string, stop func(), err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker is not available: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return "", nil, fmt.Errorf("docker is not available: %w", err)
	}
	if err := p.Health(ctx); err != nil {
		return "", nil, fmt.Errorf("docker is not available: %w", err)
	}
	c, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		return "", nil, fmt.Errorf("start %s: %w", image, err)
	}
	url, err = c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = c.Terminate(context.Background())
		return "", nil, err
	}
	return url, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.Terminate(ctx)
	}, nil
}
