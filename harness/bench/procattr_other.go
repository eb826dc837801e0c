//go:build !linux

package bench

import "syscall"

// childProcAttr: only Linux kills a child with its parent; elsewhere a runner stops
// when its standard input closes, as it does when the bench ends normally.
func childProcAttr() *syscall.SysProcAttr { return nil }
