package witness

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format of probes and answers (UDP, one message per datagram):
//
//	version(1) kind(1) len(from)(1) from len(to)(1) to gen(8) seq(8)
//	[answer: vouch(1) declared(8)] mac(32)
//
// mac is HMAC-SHA256 over everything before it, with a key every agent of
// the cluster shares (a Secret only the agents read). Naming the
// recipient stops a vouch meant for one holder from being replayed to
// another; the sequence number ties an answer to one probe (Holder), and a
// probe to one moment (Witness.Probe), so replays buy nothing. A node
// whose agent is compromised can forge anything, as it could already
// answer for the address itself.
const (
	wireVersion = 1
	kindProbe   = 1
	kindAnswer  = 2
	macSize     = sha256.Size
	// MinKeySize is the shortest key accepted (256 bits).
	MinKeySize = 32
	// maxName is the longest node name (a DNS subdomain).
	maxName = 253
)

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

// Codec signs and checks messages with the cluster's key.
type Codec struct{ key []byte }

// NewCodec checks the key's length.
func NewCodec(key []byte) (*Codec, error) {
	if len(key) < MinKeySize {
		return nil, fmt.Errorf("witness: key of %d bytes is shorter than %d", len(key), MinKeySize)
	}
	return &Codec{key: append([]byte(nil), key...)}, nil
}

// Encode returns the signed datagram for m.
func (c *Codec) Encode(m Message) ([]byte, error) {
	if len(m.From) == 0 || len(m.From) > maxName || len(m.To) == 0 || len(m.To) > maxName {
		return nil, fmt.Errorf("witness: node names must be 1 to %d bytes (from %q, to %q)", maxName, m.From, m.To)
	}
	b := make([]byte, 0, 4+len(m.From)+len(m.To)+16+9+macSize)
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
	return c.sign(b), nil
}

func (c *Codec) sign(b []byte) []byte {
	mac := hmac.New(sha256.New, c.key)
	mac.Write(b)
	return mac.Sum(b)
}

// Decode checks the datagram's MAC and that it is addressed to self, and
// returns the message.
func (c *Codec) Decode(b []byte, self string) (Message, error) {
	if len(b) < macSize {
		return Message{}, ErrBadMessage
	}
	body, sum := b[:len(b)-macSize], b[len(b)-macSize:]
	if !hmac.Equal(c.sign(append([]byte(nil), body...))[len(body):], sum) {
		return Message{}, ErrBadMessage
	}
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
