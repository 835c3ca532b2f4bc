package witness

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format of probes and answers (UDP, one message per datagram):
//
//	version(1) kind(1) len(from)(1) from len(to)(1) to gen(8) seq(8)
//	[answer: vouch(1) declared(8)] sig(64) mac(32)
//
// sig is the sender's Ed25519 signature over everything before it, with a
// key its agent made at its start and published on its own heartbeat
// Lease (AnnotationPublicKey), which only it may write: a message says
// which node sent it, and no other node can say so. mac is HMAC-SHA256
// over everything before it, with a key every agent of the cluster shares
// (a Secret only the agents read): the cheap check that turns away junk
// before a signature is verified. Naming the recipient stops a vouch
// meant for one holder from being replayed to another; the sequence
// number ties an answer to one probe (Holder), and a probe to one moment
// (Witness.Probe), so replays buy nothing.
//
// With the shared key alone, root on any node could sign as every other
// node: vouch, as a holder's witnesses, for a holder they had declared
// silent, and keep it answering beside the node the address moved to. The
// signatures confine a compromised node to speaking for itself.
const (
	wireVersion = 2
	kindProbe   = 1
	kindAnswer  = 2
	macSize     = sha256.Size
	sigSize     = ed25519.SignatureSize
	// MinKeySize is the shortest key accepted (256 bits).
	MinKeySize = 32
	// maxName is the longest node name (a DNS subdomain).
	maxName = 253
)

// Keys finds the public key a node's agent signs with (the one on its
// heartbeat Lease, AnnotationPublicKey).
type Keys interface {
	PublicKey(node string) (ed25519.PublicKey, bool)
}

// KeyMap is Keys from a map.
type KeyMap map[string]ed25519.PublicKey

// PublicKey implements Keys.
func (m KeyMap) PublicKey(node string) (ed25519.PublicKey, bool) {
	k, ok := m[node]
	return k, ok
}

// Message is a probe, or an answer to one.
type Message struct {
	From, To string
	Gen      Gen
	Seq      uint64
	// IsAnswer and Answer are set on answers.
	IsAnswer bool
	Answer   Answer
}

// ErrBadMessage is returned for a datagram that is not a well-formed,
// authentic message.
var ErrBadMessage = errors.New("witness: malformed or unauthenticated message")

// ErrUnverified is returned, with the message, for a well-formed message
// under the cluster's key whose signature could not be verified: its
// sender's public key is not known here, or the one known is not the one
// it signed with (its agent restarted with a new one). The caller reads
// the sender's key again and drops the message.
var ErrUnverified = errors.New("witness: signature not verified")

// Codec signs and checks messages with the cluster's key and this node's
// own.
type Codec struct {
	key  []byte
	self ed25519.PrivateKey
	keys Keys
}

// NewCodec checks the cluster's key's length; self signs this node's
// messages, keys verifies the others'.
func NewCodec(key []byte, self ed25519.PrivateKey, keys Keys) (*Codec, error) {
	if len(key) < MinKeySize {
		return nil, fmt.Errorf("witness: key of %d bytes is shorter than %d", len(key), MinKeySize)
	}
	if len(self) != ed25519.PrivateKeySize || keys == nil {
		return nil, errors.New("witness: this node's private key and a source of the others' public keys are required")
	}
	return &Codec{key: append([]byte(nil), key...), self: self, keys: keys}, nil
}

// Encode returns the signed datagram for m.
func (c *Codec) Encode(m Message) ([]byte, error) {
	if len(m.From) == 0 || len(m.From) > maxName || len(m.To) == 0 || len(m.To) > maxName {
		return nil, fmt.Errorf("witness: node names must be 1 to %d bytes (from %q, to %q)", maxName, m.From, m.To)
	}
	b := make([]byte, 0, 4+len(m.From)+len(m.To)+16+9+sigSize+macSize)
	kind := byte(kindProbe)
	if m.IsAnswer {
		kind = kindAnswer
	}
	b = append(b, wireVersion, kind, byte(len(m.From)))
	b = append(b, m.From...)
	b = append(b, byte(len(m.To)))
	b = append(b, m.To...)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Gen))
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	if m.IsAnswer {
		vouch := byte(0)
		if m.Answer.Vouch {
			vouch = 1
		}
		b = append(b, vouch)
		b = binary.BigEndian.AppendUint64(b, uint64(m.Answer.Declared))
	}
	b = append(b, ed25519.Sign(c.self, b)...)
	return c.mac(b), nil
}

func (c *Codec) mac(b []byte) []byte {
	mac := hmac.New(sha256.New, c.key)
	mac.Write(b)
	return mac.Sum(b)
}

// Decode checks the datagram's MAC, that it is addressed to self and
// signed by the node it names as its sender, and returns the message.
// A message whose signature is not verified is returned with
// ErrUnverified, for its sender's name.
func (c *Codec) Decode(b []byte, self string) (Message, error) {
	if len(b) < sigSize+macSize {
		return Message{}, ErrBadMessage
	}
	signed, sum := b[:len(b)-macSize], b[len(b)-macSize:]
	if !hmac.Equal(c.mac(append([]byte(nil), signed...))[len(signed):], sum) {
		return Message{}, ErrBadMessage
	}
	body, sig := signed[:len(signed)-sigSize], signed[len(signed)-sigSize:]
	r := reader{b: body}
	version, kind := r.byte(), r.byte()
	m := Message{From: r.name(), To: r.name(), Gen: Gen(r.uint64()), Seq: r.uint64()}
	switch kind {
	case kindProbe:
	case kindAnswer:
		m.IsAnswer = true
		vouch := r.byte()
		m.Answer.Vouch, r.bad = vouch == 1, r.bad || vouch > 1
		m.Answer.Declared = Gen(r.uint64())
	default:
		r.bad = true
	}
	if r.bad || len(r.b) != 0 || version != wireVersion || m.From == "" || m.To == "" {
		return Message{}, ErrBadMessage
	}
	if m.To != self {
		return Message{}, fmt.Errorf("%w: addressed to %q, not %q", ErrBadMessage, m.To, self)
	}
	pub, ok := c.keys.PublicKey(m.From)
	if !ok {
		return Message{From: m.From}, fmt.Errorf("%w: no public key of %q known", ErrUnverified, m.From)
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, body, sig) {
		return Message{From: m.From}, fmt.Errorf("%w: not signed by %q's known key", ErrUnverified, m.From)
	}
	return m, nil
}

// reader reads big-endian fields, remembering whether it ran short.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || len(r.b) < n {
		r.bad = true
		return make([]byte, n)
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) byte() byte { return r.take(1)[0] }

func (r *reader) uint64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }

func (r *reader) name() string { return string(r.take(int(r.byte()))) }
