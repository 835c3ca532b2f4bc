package witness

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

var testKey = bytes.Repeat([]byte{7}, MinKeySize)

func TestWireRoundTrip(t *testing.T) {
	c, err := NewCodec(testKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []Message{
		{From: "node-a", To: "node-b", Gen: 1 << 60, Seq: 42},
		{From: "node-b", To: "node-a", Gen: 3, Seq: 42, IsAnswer: true, Answer: Answer{Vouch: true, Declared: 2}},
		{From: "b", To: "a", Gen: 3, Seq: 1, IsAnswer: true, Answer: Answer{Declared: 3}},
	} {
		b, err := c.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Decode(b, m.To)
		if err != nil || got != m {
			t.Fatalf("Decode(Encode(%+v)) = %+v, %v", m, got, err)
		}
	}
}

func TestWireRefusesForgeriesAndMisdirection(t *testing.T) {
	c, _ := NewCodec(testKey)
	other, _ := NewCodec(bytes.Repeat([]byte{8}, MinKeySize))
	m := Message{From: "b", To: "a", Gen: 3, Seq: 9, IsAnswer: true, Answer: Answer{Vouch: true}}
	good, _ := c.Encode(m)
	forged, _ := other.Encode(m)
	flipped := bytes.Clone(good)
	flipped[len(flipped)-macSize-9] ^= 1 // vouch byte

	for name, b := range map[string][]byte{
		"other key":  forged,
		"tampered":   flipped,
		"truncated":  good[:len(good)-1],
		"empty":      nil,
		"short":      good[:10],
		"mac only":   good[len(good)-macSize:],
		"extra byte": append(bytes.Clone(good), 0),
	} {
		if _, err := c.Decode(b, "a"); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: Decode error = %v, want ErrBadMessage", name, err)
		}
	}
	if _, err := c.Decode(good, "c"); err == nil || !strings.Contains(err.Error(), "addressed to") {
		t.Errorf("a message for a decoded by c: %v", err)
	}
}

func TestWireRefusesBadInput(t *testing.T) {
	if _, err := NewCodec([]byte("short")); err == nil {
		t.Error("a 5-byte key accepted")
	}
	c, _ := NewCodec(testKey)
	if _, err := c.Encode(Message{From: "", To: "a"}); err == nil {
		t.Error("empty sender accepted")
	}
	if _, err := c.Encode(Message{From: strings.Repeat("x", 254), To: "a"}); err == nil {
		t.Error("254-byte name accepted")
	}
}

// FuzzDecode: no datagram makes Decode panic, and whatever it accepts
// re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	c, _ := NewCodec(testKey)
	seed, _ := c.Encode(Message{From: "b", To: "a", Gen: 1, Seq: 1})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := c.Decode(b, "a")
		if err != nil {
			return
		}
		again, err := c.Encode(m)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted %x, re-encoded %x (%v)", b, again, err)
		}
	})
}
