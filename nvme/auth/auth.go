package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"strings"
)

// Hash is a DH-HMAC-CHAP hash function identifier.
type Hash uint8

// The hash functions DH-HMAC-CHAP defines.
const (
	SHA256 Hash = 1
	SHA384 Hash = 2
	SHA512 Hash = 3
)

// New returns the hash function, nil for an unknown identifier.
func (h Hash) New() func() hash.Hash {
	switch h {
	case SHA256:
		return sha256.New
	case SHA384:
		return sha512.New384
	case SHA512:
		return sha512.New
	}
	return nil
}

// Size is the hash's output length in bytes, 0 if unknown.
func (h Hash) Size() int {
	switch h {
	case SHA256:
		return 32
	case SHA384:
		return 48
	case SHA512:
		return 64
	}
	return 0
}

func (h Hash) String() string {
	switch h {
	case SHA256:
		return "hmac(sha256)"
	case SHA384:
		return "hmac(sha384)"
	case SHA512:
		return "hmac(sha512)"
	}
	return fmt.Sprintf("hash(%d)", uint8(h))
}

// DHGroup is a DH-HMAC-CHAP Diffie-Hellman group identifier.
type DHGroup uint8

// The groups: the null group (no Diffie-Hellman exchange) and RFC 7919's
// finite-field groups.
const (
	DHNull    DHGroup = 0
	FFDHE2048 DHGroup = 1
	FFDHE3072 DHGroup = 2
	FFDHE4096 DHGroup = 3
	FFDHE6144 DHGroup = 4
	FFDHE8192 DHGroup = 5
)

// Errors.
var (
	// ErrSecret: a DHHC-1 secret that does not parse, or whose CRC does
	// not match.
	ErrSecret = errors.New("auth: bad DH-HMAC-CHAP secret")
	// ErrMessage: an authentication message that does not decode.
	ErrMessage = errors.New("auth: malformed authentication message")
)

// Secret is a DH-HMAC-CHAP secret: its key, and the hash its key is
// transformed with before use (0: none).
type Secret struct {
	Key       []byte
	Transform Hash
}

// ParseSecret parses the DHHC-1 representation of `nvme gen-dhchap-key`,
// "DHHC-1:TT:BASE64:", where TT is the transformation hash (00 none, 01
// SHA-256, 02 SHA-384, 03 SHA-512) and BASE64 encodes the 32-, 48- or
// 64-byte key followed by its CRC-32 (IEEE, little endian).
func ParseSecret(s string) (Secret, error) {
	rest, ok := strings.CutPrefix(s, "DHHC-1:")
	if !ok || len(rest) < 4 || rest[2] != ':' {
		return Secret{}, fmt.Errorf("%w: want the form DHHC-1:TT:BASE64: (TT the transformation)", ErrSecret)
	}
	var t Hash
	switch rest[:2] {
	case "00":
	case "01":
		t = SHA256
	case "02":
		t = SHA384
	case "03":
		t = SHA512
	default:
		return Secret{}, fmt.Errorf("%w: unknown transformation %q", ErrSecret, rest[:2])
	}
	b64 := strings.TrimSuffix(rest[3:], ":")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return Secret{}, fmt.Errorf("%w: %w", ErrSecret, err)
	}
	n := len(raw) - 4
	if n != 32 && n != 48 && n != 64 {
		return Secret{}, fmt.Errorf("%w: key of %d bytes (32, 48 or 64)", ErrSecret, max(n, 0))
	}
	key := raw[:n]
	if binary.LittleEndian.Uint32(raw[n:]) != crc32.ChecksumIEEE(key) {
		return Secret{}, fmt.Errorf("%w: CRC mismatch", ErrSecret)
	}
	// A transformed key is the transformation's HMAC output, and Linux
	// keys the response HMAC with as many bytes of it as the secret had:
	// the lengths must agree (nvme gen-dhchap-key enforces the same).
	if t != 0 && n != t.Size() {
		return Secret{}, fmt.Errorf("%w: a %d-byte key with transformation %s (wants %d bytes)", ErrSecret, n, t, t.Size())
	}
	return Secret{Key: bytes.Clone(key), Transform: t}, nil
}

// GenerateSecret makes a secret as `nvme gen-dhchap-key` does: keyLen
// (32, 48 or 64) random bytes from rand, which with a transformation are
// first put through it for nqn (HMAC(transform, random, nqn ||
// "NVMe-over-Fabrics")), so keyLen must then be the transformation's size.
func GenerateSecret(rand io.Reader, transform Hash, keyLen int, nqn string) (Secret, error) {
	if keyLen != 32 && keyLen != 48 && keyLen != 64 {
		return Secret{}, fmt.Errorf("%w: key length %d (32, 48 or 64)", ErrSecret, keyLen)
	}
	if transform != 0 && transform.Size() != keyLen {
		if transform.Size() == 0 {
			return Secret{}, fmt.Errorf("%w: unknown transformation %d", ErrSecret, transform)
		}
		return Secret{}, fmt.Errorf("%w: key length %d with %s (wants %d)", ErrSecret, keyLen, transform, transform.Size())
	}
	raw := make([]byte, keyLen)
	if _, err := io.ReadFull(rand, raw); err != nil {
		return Secret{}, fmt.Errorf("auth: random key: %w", err)
	}
	s := Secret{Key: raw, Transform: transform}
	if transform != 0 {
		k, err := s.TransformedKey(nqn)
		if err != nil {
			return Secret{}, err
		}
		s.Key = k
	}
	return s, nil
}

// String is the DHHC-1 representation ParseSecret reads.
func (s Secret) String() string {
	raw := binary.LittleEndian.AppendUint32(bytes.Clone(s.Key), crc32.ChecksumIEEE(s.Key))
	return fmt.Sprintf("DHHC-1:%02x:%s:", uint8(s.Transform), base64.StdEncoding.EncodeToString(raw))
}

// TransformedKey is the key as DH-HMAC-CHAP uses it for nqn (the NQN of
// the side that owns the secret): HMAC(Transform, Key, nqn ||
// "NVMe-over-Fabrics"), or Key itself with no transformation.
func (s Secret) TransformedKey(nqn string) ([]byte, error) {
	if s.Transform == 0 {
		return bytes.Clone(s.Key), nil
	}
	nh := s.Transform.New()
	if nh == nil {
		return nil, fmt.Errorf("%w: unknown transformation %d", ErrSecret, s.Transform)
	}
	m := hmac.New(nh, s.Key)
	m.Write([]byte(nqn))
	m.Write([]byte("NVMe-over-Fabrics"))
	return m.Sum(nil), nil
}

// Exchange is what both sides' responses are computed over.
type Exchange struct {
	Hash    Hash
	TID     uint16
	HostNQN string
	SubNQN  string
}

// HostResponse is the host's response to challenge c1 with sequence
// number s1, keyed by the host's transformed key:
// HMAC(c1 || S1 || T_ID || SC_C (0) || "HostHost" || host NQN || 0 ||
// subsystem NQN).
func (e Exchange) HostResponse(key, c1 []byte, s1 uint32) ([]byte, error) {
	return e.response(key, c1, s1, "HostHost", e.HostNQN, e.SubNQN)
}

// ControllerResponse is the controller's response to the host's
// challenge c2 with sequence number s2, keyed by the controller's
// transformed key: HMAC(c2 || S2 || T_ID || 0 || "Controller" ||
// subsystem NQN || 0 || host NQN).
func (e Exchange) ControllerResponse(key, c2 []byte, s2 uint32) ([]byte, error) {
	return e.response(key, c2, s2, "Controller", e.SubNQN, e.HostNQN)
}

func (e Exchange) response(key, c []byte, seq uint32, role, first, second string) ([]byte, error) {
	nh := e.Hash.New()
	if nh == nil {
		return nil, fmt.Errorf("auth: unknown hash %d", e.Hash)
	}
	if len(c) != e.Hash.Size() {
		return nil, fmt.Errorf("auth: challenge of %d bytes for %s", len(c), e.Hash)
	}
	m := hmac.New(nh, key)
	m.Write(c)
	m.Write(binary.LittleEndian.AppendUint32(nil, seq))
	m.Write(binary.LittleEndian.AppendUint16(nil, e.TID))
	m.Write([]byte{0})
	m.Write([]byte(role))
	m.Write([]byte(first))
	m.Write([]byte{0})
	m.Write([]byte(second))
	return m.Sum(nil), nil
}

// Augment is the augmented challenge of a DH exchange:
// HMAC(h, H(sessionKey), c), the challenge a response is computed over
// when the group is not null.
func Augment(h Hash, sessionKey, c []byte) ([]byte, error) {
	nh := h.New()
	if nh == nil {
		return nil, fmt.Errorf("auth: unknown hash %d", h)
	}
	d := nh()
	d.Write(sessionKey)
	m := hmac.New(nh, d.Sum(nil))
	m.Write(c)
	return m.Sum(nil), nil
}

// Verify reports whether got equals want, in constant time.
func Verify(got, want []byte) bool { return hmac.Equal(got, want) }
