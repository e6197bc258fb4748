package sqlitefile

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
)

// Open opens (creating dir and the file if needed) the database file name in
// dir. The caller applies its schema and closes the handle. Each connection
// keeps the statements it runs prepared (cachingConn), so a query string is
// parsed once per connection.
func Open(dir, name string) (*sql.DB, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	q := url.Values{}
	for _, p := range []string{"busy_timeout(15000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	dsn := "file:" + filepath.ToSlash(filepath.Join(dir, name)) + "?" + q.Encode()
	base, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(newCachingConnector(base))
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(0)
	return db, nil
}
