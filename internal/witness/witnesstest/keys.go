// Package witnesstest holds what the witness protocol's tests share: each
// test node's Ed25519 key pair, made from its name, so that every test peer
// can know every other's public key the way the agents read them from the
// heartbeat Leases, and fuzz corpora signed with them stay valid.
package witnesstest

import "crypto/ed25519"

// NodeKey is node's signing key: the Ed25519 key whose seed is the node's
// name, zero-padded (truncated past 32 bytes).
func NodeKey(node string) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	copy(seed, node)
	return ed25519.NewKeyFromSeed(seed)
}

// PublicKey is NodeKey's public half.
func PublicKey(node string) ed25519.PublicKey {
	return NodeKey(node).Public().(ed25519.PublicKey)
}

// AnyNode knows the public key of every node, from its name
// (witness.Keys).
type AnyNode struct{}

// PublicKey implements witness.Keys.
func (AnyNode) PublicKey(node string) (ed25519.PublicKey, bool) { return PublicKey(node), true }
