package main

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// takeTerminal makes the process the foreground process group of its controlling
// terminal, when it runs in the foreground of one, and returns the function that gives
// the terminal back.
//
// Ctrl-C sends SIGINT to the terminal's foreground group. Under `make dev` that group
// is make's, and GNU make, interrupted, kills itself with the signal once its child is
// done: the shell reports 130 although dev shut down cleanly and exited 0. In a group
// of its own and in the foreground, dev alone receives the Ctrl-C, exits 0, and so does
// make — what an interactive shell does for the jobs it starts. The terminal is the
// controlling one (/dev/tty), not stdin, so that `make dev </dev/null` in a terminal
// behaves the same. Run in the background, or without a terminal, nothing changes.
func takeTerminal() (restore func()) {
	noop := func() {}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return noop // no controlling terminal
	}
	fd := int(tty.Fd())
	fg, err := tcgetpgrp(fd)
	if err != nil || fg != syscall.Getpgrp() {
		tty.Close()
		return noop // not in its foreground
	}
	if err := syscall.Setpgid(0, 0); err != nil {
		tty.Close()
		return noop
	}
	// A group not in the foreground that sets the foreground group is stopped by
	// SIGTTOU unless it ignores it.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	if err := tcsetpgrp(fd, syscall.Getpgrp()); err != nil {
		_ = syscall.Setpgid(0, fg)
		tty.Close()
		return noop
	}
	return func() {
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		_ = tcsetpgrp(fd, fg)
		tty.Close()
	}
}

func tcgetpgrp(fd int) (int, error) {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}

func tcsetpgrp(fd, pgrp int) error {
	p := int32(pgrp)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); errno != 0 {
		return errno
	}
	return nil
}
