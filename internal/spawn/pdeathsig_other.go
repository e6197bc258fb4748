//go:build !linux

package spawn

import "syscall"

// dieWithParent has no equivalent off Linux: the child outlives a harness
// that is killed.
func dieWithParent() *syscall.SysProcAttr { return nil }
