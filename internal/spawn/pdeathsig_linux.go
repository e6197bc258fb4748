package spawn

import "syscall"

// dieWithParent makes the kernel SIGKILL the child when this process ends,
// whatever ends it.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
