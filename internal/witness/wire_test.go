package witness

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/kubext/kubext/internal/witness/witnesstest"
)

var testKey = bytes.Repeat([]byte{7}, MinKeySize)

// testNodes are the nodes of the wire tests, each with its own key pair
// (fixed seeds: the fuzz corpus stays valid).
var testNodes = []string{"a", "b", "c", "node-a", "node-b"}

func testKeys() KeyMap {
	keys := KeyMap{}
	for _, n := range testNodes {
		keys[n] = witnesstest.PublicKey(n)
	}
	return keys
}

// codecFor is node's codec, knowing every test node's public key.
func codecFor(t testing.TB, node string) *Codec {
	t.Helper()
	c, err := NewCodec(testKey, witnesstest.NodeKey(node), testKeys())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWireRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{From: "node-a", To: "node-b", Gen: 1 << 60, Seq: 42},
		{From: "node-b", To: "node-a", Gen: 3, Seq: 42, IsAnswer: true, Answer: Answer{Vouch: true, Declared: 2}},
		{From: "b", To: "a", Gen: 3, Seq: 1, IsAnswer: true, Answer: Answer{Declared: 3}},
	} {
		b, err := codecFor(t, m.From).Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := codecFor(t, m.To).Decode(b, m.To)
		if err != nil || got != m {
			t.Fatalf("Decode(Encode(%+v)) = %+v, %v", m, got, err)
		}
	}
}

func TestWireRefusesForgeriesAndMisdirection(t *testing.T) {
	a, b := codecFor(t, "a"), codecFor(t, "b")
	otherCluster, _ := NewCodec(bytes.Repeat([]byte{8}, MinKeySize), witnesstest.NodeKey("b"), testKeys())
	m := Message{From: "b", To: "a", Gen: 3, Seq: 9, IsAnswer: true, Answer: Answer{Vouch: true}}
	good, _ := b.Encode(m)
	forged, _ := otherCluster.Encode(m)
	flipped := bytes.Clone(good)
	flipped[len(flipped)-macSize-sigSize-9] ^= 1 // vouch byte

	for name, d := range map[string][]byte{
		"other cluster key": forged,
		"tampered":          flipped,
		"truncated":         good[:len(good)-1],
		"empty":             nil,
		"short":             good[:10],
		"mac only":          good[len(good)-macSize:],
		"extra byte":        append(bytes.Clone(good), 0),
	} {
		if _, err := a.Decode(d, "a"); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: Decode error = %v, want ErrBadMessage", name, err)
		}
	}
	if _, err := codecFor(t, "c").Decode(good, "c"); err == nil || !strings.Contains(err.Error(), "addressed to") {
		t.Errorf("a message for a decoded by c: %v", err)
	}
}

// A node with the cluster's key (root on any node has it) cannot speak
// for another: c signing as b is refused by a, with b's name so that a
// can read b's key again.
func TestWireRefusesAnotherNodesWord(t *testing.T) {
	a, c := codecFor(t, "a"), codecFor(t, "c")
	forged, err := c.Encode(Message{From: "b", To: "a", Gen: 3, Seq: 9, IsAnswer: true, Answer: Answer{Vouch: true}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Decode(forged, "a")
	if !errors.Is(err, ErrUnverified) || got.From != "b" || got.Answer.Vouch {
		t.Errorf("c's vouch signed as b: %+v, %v; want ErrUnverified naming b, and no vouch", got, err)
	}
	// A sender whose key a does not know.
	stranger, _ := NewCodec(testKey, witnesstest.NodeKey("d"), testKeys())
	probe, _ := stranger.Encode(Message{From: "d", To: "a", Gen: 1, Seq: 1})
	if got, err := a.Decode(probe, "a"); !errors.Is(err, ErrUnverified) || got.From != "d" {
		t.Errorf("a probe from an unknown node: %+v, %v; want ErrUnverified naming d", got, err)
	}
}

func TestWireRefusesBadInput(t *testing.T) {
	if _, err := NewCodec([]byte("short"), witnesstest.NodeKey("a"), testKeys()); err == nil {
		t.Error("a 5-byte key accepted")
	}
	if _, err := NewCodec(testKey, nil, testKeys()); err == nil {
		t.Error("no private key accepted")
	}
	if _, err := NewCodec(testKey, witnesstest.NodeKey("a"), nil); err == nil {
		t.Error("no public keys accepted")
	}
	c := codecFor(t, "a")
	if _, err := c.Encode(Message{From: "", To: "a"}); err == nil {
		t.Error("empty sender accepted")
	}
	if _, err := c.Encode(Message{From: strings.Repeat("x", 254), To: "a"}); err == nil {
		t.Error("254-byte name accepted")
	}
}

func TestPublicKeyAnnotation(t *testing.T) {
	k := witnesstest.PublicKey("a")
	got, err := ParsePublicKey(FormatPublicKey(k))
	if err != nil || !got.Equal(k) {
		t.Fatalf("round trip: %x, %v", got, err)
	}
	for _, bad := range []string{"", "not base64!", FormatPublicKey(k[:31])} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzDecode: no datagram makes Decode panic, and whatever it accepts
// re-encodes, by its sender, to the same bytes (Ed25519 signs
// deterministically).
func FuzzDecode(f *testing.F) {
	seed, _ := codecFor(f, "b").Encode(Message{From: "b", To: "a", Gen: 1, Seq: 1})
	f.Add(seed)
	f.Add([]byte{})
	a := codecFor(f, "a")
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := a.Decode(b, "a")
		if err != nil {
			return
		}
		again, err := codecFor(t, m.From).Encode(m)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted %x, re-encoded %x (%v)", b, again, err)
		}
	})
}
