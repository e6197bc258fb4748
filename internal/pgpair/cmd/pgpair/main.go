// Command pgpair starts a PostgreSQL primary and a streaming standby of it
// (package internal/pgpair) for the shell lanes of CI and the benchmarks,
// creates the databases named by -db on it, prints
//
//	PRIMARY_URL=postgres://…/<first db>
//	STANDBY_URL=postgres://…/<first db>
//
// on stdout, and runs until SIGINT, SIGTERM or the end of its standard
// input, then stops both servers and removes their files.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/orderly/orderly/internal/pgpair"
)

func main() {
	delay := flag.Duration("apply-delay", 0, "the standby's recovery_min_apply_delay")
	dbs := flag.String("db", "orderly", "databases to create, comma-separated; the URLs printed name the first")
	waitStdin := flag.Bool("stdin", false, "also stop at the end of standard input")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := pgpair.Start(ctx, pgpair.Options{ApplyDelay: *delay})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgpair:", err)
		os.Exit(1)
	}
	defer p.Close()
	names := strings.Split(*dbs, ",")
	for _, db := range names {
		if err := p.CreateDatabase(ctx, db); err != nil {
			fmt.Fprintln(os.Stderr, "pgpair:", err)
			p.Close()
			os.Exit(1)
		}
	}
	fmt.Printf("PRIMARY_URL=%s\nSTANDBY_URL=%s\n", p.PrimaryURL(names[0]), p.StandbyURL(names[0]))
	if *waitStdin {
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
	}
	<-ctx.Done()
}
