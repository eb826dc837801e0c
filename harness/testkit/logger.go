package testkit

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// LogEnv names the one environment variable that sets how much of the code under test's
// logging a test shows: debug, info, warn (the default) or error; off discards it.
const LogEnv = "RENDEZVOUS_TEST_LOG"

// LogLevel is the level LogEnv asks for; ok is false for off.
func LogLevel() (level slog.Level, ok bool) {
	switch strings.ToLower(os.Getenv(LogEnv)) {
	case "off":
		return 0, false
	case "debug":
		return slog.LevelDebug, true
	case "info":
		return slog.LevelInfo, true
	case "error":
		return slog.LevelError, true
	}
	return slog.LevelWarn, true
}

// Logger writes the code under test's log lines at LogEnv's level into the test's
// output, which go test shows on failure and with -v.
func Logger(t testing.TB) *slog.Logger {
	return LoggerTo(t.Output())
}

// LoggerTo is Logger writing to w, for a test that also reads the lines (or for output
// that outlives one test, such as a replica shared by a package's tests, given
// os.Stderr).
func LoggerTo(w io.Writer) *slog.Logger {
	level, ok := LogLevel()
	if !ok {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
