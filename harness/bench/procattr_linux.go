package bench

import "syscall"

// childProcAttr has the kernel kill a process the bench started when the bench dies,
// so that no runner outlives a bench that was killed.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
