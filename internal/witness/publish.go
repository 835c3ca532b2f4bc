package witness

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// The agent publishes its generation and its declarations on its own
// heartbeat Lease, which only it may write (the admission policy pins a
// Lease's writer to its node): the controller reads declarations there,
// and a restarted agent reads back both before it probes or answers.
const (
	// AnnotationGeneration holds the agent's current generation.
	AnnotationGeneration = "witness.ip.kubext.io/generation"
	// AnnotationDeclared holds its declarations: "node=gen,node=gen",
	// sorted by node.
	AnnotationDeclared = "witness.ip.kubext.io/declared"
	// AnnotationPublicKey holds the Ed25519 public key the agent signs its
	// messages with (standard base64), one per run of the agent.
	AnnotationPublicKey = "witness.ip.kubext.io/public-key"
	// maxDeclared bounds the annotation (a declaration per node of a
	// pool's witness sets; annotations are limited to 256 KiB in all).
	maxDeclared = 1000
)

// FormatDeclared is the annotation value for declarations.
func FormatDeclared(d map[string]Gen) (string, error) {
	if len(d) > maxDeclared {
		return "", fmt.Errorf("witness: %d declarations, more than %d", len(d), maxDeclared)
	}
	parts := make([]string, 0, len(d))
	for _, node := range slices.Sorted(maps.Keys(d)) {
		if node == "" || len(node) > maxName || strings.ContainsAny(node, "=,") {
			return "", fmt.Errorf("witness: %q is not a node name", node)
		}
		parts = append(parts, node+"="+strconv.FormatUint(uint64(d[node]), 10))
	}
	return strings.Join(parts, ","), nil
}

// ParseDeclared reads an annotation written by FormatDeclared. Anything
// else is an error, never a partial result: a controller that misread a
// declaration could move an address too early, and an agent that
// misread its own could vouch for what it declared silent.
func ParseDeclared(v string) (map[string]Gen, error) {
	d := map[string]Gen{}
	if v == "" {
		return d, nil
	}
	for part := range strings.SplitSeq(v, ",") {
		node, gen, ok := strings.Cut(part, "=")
		if !ok || node == "" || len(node) > maxName {
			return nil, fmt.Errorf("witness: declaration %q is not node=generation", part)
		}
		g, err := strconv.ParseUint(gen, 10, 64)
		if err != nil || g == 0 {
			return nil, fmt.Errorf("witness: declaration %q: generation is not a positive number", part)
		}
		if _, dup := d[node]; dup {
			return nil, fmt.Errorf("witness: node %q declared twice", node)
		}
		d[node] = Gen(g)
		if len(d) > maxDeclared {
			return nil, fmt.Errorf("witness: more than %d declarations", maxDeclared)
		}
	}
	return d, nil
}

// ParseGen reads AnnotationGeneration ("" is generation 0: never used).
func ParseGen(v string) (Gen, error) {
	if v == "" {
		return 0, nil
	}
	g, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("witness: generation %q is not a number", v)
	}
	return Gen(g), nil
}

// FormatPublicKey is the annotation value for a public key.
func FormatPublicKey(k ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(k) }

// ParsePublicKey reads AnnotationPublicKey.
func ParsePublicKey(v string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("witness: public key %q is not %d bytes of base64", v, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}
