// Package migrations holds Orderly's versioned SQL schema, one directory per
// dialect, embedded in the binary and applied with github.com/pressly/goose.
// Apply is safe to call from several instances starting at once on
// PostgreSQL: goose takes a session-level advisory lock first.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Dialect names a supported database.
type Dialect string

// Supported dialects.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// Apply brings db's schema up to the newest migration of dialect d. It
// returns an error if a migration fails; a failed migration is rolled back.
func Apply(ctx context.Context, db *sql.DB, d Dialect) error {
	sub, err := fs.Sub(files, string(d))
	if err != nil {
		return err
	}
	var opts []goose.ProviderOption
	var gd goose.Dialect
	switch d {
	case Postgres:
		gd = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
		if err != nil {
			return err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case SQLite:
		gd = goose.DialectSQLite3
	default:
		return fmt.Errorf("migrations: unknown dialect %q", d)
	}
	p, err := goose.NewProvider(gd, db, sub, opts...)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}
