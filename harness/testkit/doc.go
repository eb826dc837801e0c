// Package testkit is what the tests of every package share: the fake external service
// that workflows call, the logger tests hand to the code under test, a request to a test
// server with its whole answer (Do), a reader of a replica's /metrics, and the TestMain
// that fails a package whose tests leave a goroutine behind. Starting a whole replica is in testkit/replica, apart, so that the
// packages a replica is built from can use this one in their own tests.
//
// It is test-only: no product package may import it, and TestBinariesLinkNoTestCode
// (cmd/rendezvous) fails when a binary links it.
package testkit
