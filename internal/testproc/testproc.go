// Package testproc holds what the tests that run other processes share.
package testproc

import (
	"bytes"
	"sync"
)

// SyncBuffer collects a running process's output (as its cmd.Stdout or
// Stderr); String is safe to call while the process writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
