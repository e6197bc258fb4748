// Package sqlitetest gives tests a data directory holding an embedded-store
// database already migrated to the newest schema, without running the
// migrations for each test: a migrated, empty database file is kept in a
// cache directory under the system's temporary directory, one per set of
// migration files (named after migrations.Hash, so a new or edited
// migration makes a new one and the older one is removed), and every call
// copies it into the test's own temporary directory. sqlite.Open on the
// copy finds the schema up to date; what the test writes goes to its copy
// alone.
package sqlitetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/orderly/orderly/migrations"
	"github.com/orderly/orderly/store/sqlite"
)

var (
	templateMu    sync.Mutex // guards the three below
	templateBuilt bool
	templateFile  string
	templateErr   error
)

// template returns the template file, finding or making it on first use,
// or again when rebuild is set.
func template(rebuild bool) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if !templateBuilt || rebuild {
		templateFile, templateErr = "", nil
		migrateTemplate()
		templateBuilt = true
	}
	return templateFile, templateErr
}

// NewDir returns a new temporary directory for t (removed when t ends) that
// holds a migrated, empty database file (sqlite.FileName), for sqlite.Open.
func NewDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	file, err := template(false)
	if err == nil {
		err = copyFile(filepath.Join(dir, sqlite.FileName), file)
		if errors.Is(err, fs.ErrNotExist) { // removed as stale by a newer run meanwhile
			if file, err = template(true); err == nil {
				err = copyFile(filepath.Join(dir, sqlite.FileName), file)
			}
		}
	}
	if err != nil {
		t.Fatalf("sqlitetest: %v", err)
	}
	return dir
}

// moduleRoot is the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// migrateTemplate finds or makes the migrated database of today's
// migrations: made in a directory of its own by sqlite.Open and Close
// (which checkpoints it into its one file), then renamed into place, so
// test processes starting at once never see a half-made one (the loser of
// a race removes its own).
func migrateTemplate() {
	hash, err := migrations.Hash(migrations.SQLite)
	if err != nil {
		templateErr = err
		return
	}
	checkout, err := moduleRoot()
	if err != nil {
		templateErr = err
		return
	}
	sum := sha256.Sum256([]byte(checkout))
	root := filepath.Join(os.TempDir(), fmt.Sprintf("orderly-sqlitetest-%d", os.Getuid()), hex.EncodeToString(sum[:8]))
	final := filepath.Join(root, hash[:16])
	templateFile = filepath.Join(final, sqlite.FileName)
	if _, err := os.Stat(templateFile); err == nil {
		return
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		templateErr = err
		return
	}
	dir, err := os.MkdirTemp(root, "build-")
	if err != nil {
		templateErr = err
		return
	}
	defer os.RemoveAll(dir) // gone after the rename, or the loser's
	st, err := sqlite.Open(context.Background(), dir)
	if err != nil {
		templateErr = fmt.Errorf("migrate the template database: %w", err)
		return
	}
	if err := st.Close(); err != nil {
		templateErr = fmt.Errorf("close the template database: %w", err)
		return
	}
	for _, side := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(filepath.Join(dir, sqlite.FileName+side)); err == nil {
			templateErr = fmt.Errorf("the template database left its %s file after Close", side)
			return
		}
	}
	if err := os.Rename(dir, final); err != nil {
		if _, serr := os.Stat(templateFile); serr != nil { // not another process's win
			templateErr = fmt.Errorf("install the template database: %w", err)
		}
		return
	}
	// This checkout's templates of other migrations are stale (a test
	// process still copying one makes it again: see NewDir). Other
	// checkouts' are under other roots.
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if e.Name() != hash[:16] && !strings.HasPrefix(e.Name(), "build-") {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
