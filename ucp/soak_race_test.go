//go:build race

package ucp_test

// raceDetector: the race detector's own memory grows with every new
// synchronisation address (about 0.9 KiB per cycle in a loop of Go
// allocations, mutexes, pins and cleanups alone), so RSS bounds do not hold.
const raceDetector = true
