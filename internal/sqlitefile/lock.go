package sqlitefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gofrs/flock"
)

// LockFileName is the file in a data directory that LockDir locks.
const LockFileName = "LOCK"

// ErrDirLocked is the error of LockDir when another process (or another
// handle in this one) holds the data directory.
var ErrDirLocked = errors.New("the data directory is in use by another process")

// LockDir takes an exclusive, non-blocking lock on the file LockFileName in
// dir (flock(2) on Unix, LockFileEx on Windows), creating dir and the file if
// needed, and returns the function that releases it. The lock is released by
// the operating system when the process ends, even by SIGKILL, so a crash
// never leaves a directory locked. An SQLite file is single-node: a second
// process writing it would break the guarantees of its own in-process
// coordination, so a store that owns a directory takes this lock first. If
// another holder has the lock, the error wraps ErrDirLocked and names dir.
func LockDir(dir string) (unlock func() error, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	path := filepath.Join(dir, LockFileName)
	l := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	ok, err := l.TryLock()
	if err != nil {
		return nil, fmt.Errorf("locking the data directory %s: %w", dir, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s is locked (%s); stop the other process or choose another directory", ErrDirLocked, dir, path)
	}
	return l.Unlock, nil
}
