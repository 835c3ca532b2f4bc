package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// Bad settings stop the agent before it connects anywhere, with a message
// naming the flag.
func TestRunRefusesBadFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	missing := filepath.Join(t.TempDir(), "boot_id")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--node-name or $NODE_NAME is required"},
		{[]string{"--node-name", "n1", "--reboot-method", "kexec"}, `--reboot-method must be command or signal, not "kexec"`},
		{[]string{"--node-name", "n1", "--reboot-command", "  "}, "--reboot-command: the reboot command is empty"},
		{[]string{"--node-name", "n1", "--boot-id-file", missing}, "--boot-id-file: open " + missing},
	} {
		err := run(context.Background(), tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// --version answers before any other check (no node name, no cluster).
func TestRunVersion(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("KUBECONFIG", "/nonexistent")
	if err := run(context.Background(), []string{"--version"}); err != nil {
		t.Fatalf("run(--version) = %v", err)
	}
}
