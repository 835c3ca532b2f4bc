package main

import (
	"context"
	"testing"
)

// --version answers before any other check (no node name, no cluster).
func TestRunVersion(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("KUBECONFIG", "/nonexistent")
	if err := run(context.Background(), []string{"--version"}); err != nil {
		t.Fatalf("run(--version) = %v", err)
	}
}
