// Package migrations holds Orderly's versioned SQL schema, one directory per
// dialect, embedded in the binary and applied with github.com/pressly/goose.
// Apply is safe to call from several instances starting at once on
// PostgreSQL: goose takes a session-level advisory lock first.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
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

// Hash returns a hex SHA-256 digest of dialect d's migration files (their
// names and contents, in order): it changes exactly when a migration is
// added or edited, so a test helper can name a database migrated by these
// files after it (store/pgtest's template database).
func Hash(d Dialect) (string, error) {
	sub, err := fs.Sub(files, string(d))
	if err != nil {
		return "", err
	}
	names, err := fs.Glob(sub, "*.sql")
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", fmt.Errorf("migrations: unknown dialect %q", d)
	}
	h := sha256.New()
	for _, name := range names { // fs.Glob returns them sorted
		b, err := fs.ReadFile(sub, name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
