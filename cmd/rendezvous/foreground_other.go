//go:build !linux

package main

// takeTerminal is Linux's; elsewhere dev leaves the terminal's process groups alone.
func takeTerminal() (restore func()) { return func() {} }
