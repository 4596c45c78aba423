package auth

import (
	"bytes"
	"crypto/rand"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestSecretRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		n int
		t Hash
	}{{32, 0}, {32, SHA256}, {48, SHA384}, {64, SHA512}} {
		key := make([]byte, tc.n)
		_, _ = rand.Read(key)
		s := Secret{Key: key, Transform: tc.t}
		str := s.String()
		if !strings.HasPrefix(str, "DHHC-1:0") || !strings.HasSuffix(str, ":") {
			t.Fatalf("format %q", str)
		}
		got, err := ParseSecret(str)
		if err != nil || !bytes.Equal(got.Key, key) || got.Transform != tc.t {
			t.Fatalf("%q: %+v, %v", str, got, err)
		}
	}
}

func TestSecretRefused(t *testing.T) {
	good := Secret{Key: bytes.Repeat([]byte{7}, 32), Transform: SHA256}.String()
	flip := []byte(good)
	flip[12] ^= 1 // a key byte: the CRC no longer matches
	for _, s := range []string{
		"", "DHHC-1:", "DHHC-2:00:AAAA:", "DHHC-1:04:AAAA:", "DHHC-1:00:!!!!:",
		"DHHC-1:00:" + Secret{Key: make([]byte, 16)}.String()[10:], // 16-byte key
		string(flip),
	} {
		if _, err := ParseSecret(s); !errors.Is(err, ErrSecret) {
			t.Errorf("%q: %v, want ErrSecret", s, err)
		}
	}
}

// TestResponses: the transformed key depends on the NQN; each side's
// response verifies against the same computation and fails for any other
// key, challenge, sequence number, transaction or NQN.
func TestResponses(t *testing.T) {
	s := Secret{Key: bytes.Repeat([]byte{1}, 32), Transform: SHA256}
	k1, _ := s.TransformedKey("nqn.host-a")
	k2, _ := s.TransformedKey("nqn.host-b")
	if bytes.Equal(k1, k2) || bytes.Equal(k1, s.Key) {
		t.Fatal("the transformed key does not depend on the NQN")
	}
	for _, h := range []Hash{SHA256, SHA384, SHA512} {
		e := Exchange{Hash: h, TID: 3, HostNQN: "nqn.host-a", SubNQN: "nqn.sub"}
		c := bytes.Repeat([]byte{9}, h.Size())
		r, err := e.HostResponse(k1, c, 42)
		if err != nil || len(r) != h.Size() {
			t.Fatalf("%s: %d bytes, %v", h, len(r), err)
		}
		same, _ := e.HostResponse(k1, c, 42)
		if !Verify(r, same) {
			t.Fatalf("%s: the response is not deterministic", h)
		}
		other := e
		other.TID = 4
		variants := [][]byte{}
		for _, f := range []func() ([]byte, error){
			func() ([]byte, error) { return e.HostResponse(k2, c, 42) },
			func() ([]byte, error) { return e.HostResponse(k1, c, 43) },
			func() ([]byte, error) { return other.HostResponse(k1, c, 42) },
			func() ([]byte, error) { return e.ControllerResponse(k1, c, 42) },
		} {
			v, err := f()
			if err != nil {
				t.Fatal(err)
			}
			variants = append(variants, v)
		}
		for i, v := range variants {
			if Verify(r, v) {
				t.Errorf("%s: variant %d gives the same response", h, i)
			}
		}
		if _, err := e.HostResponse(k1, c[:len(c)-1], 42); err == nil {
			t.Errorf("%s: a short challenge was accepted", h)
		}
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	n := Negotiate{TID: 1, Hashes: []Hash{SHA512, SHA256}, Groups: []DHGroup{DHNull, FFDHE2048}}
	b, err := n.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := UnmarshalNegotiate(b); err != nil || !reflect.DeepEqual(got, n) {
		t.Fatalf("negotiate: %+v, %v", got, err)
	}
	c := Challenge{TID: 1, Hash: SHA256, Group: DHNull, Seq: 77, C1: bytes.Repeat([]byte{5}, 32), DHValue: []byte{}}
	b, _ = c.Marshal()
	if got, err := UnmarshalChallenge(b); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("challenge: %+v, %v", got, err)
	}
	r := Reply{TID: 1, Seq: 9, Response: bytes.Repeat([]byte{6}, 32), C2: bytes.Repeat([]byte{8}, 32), DHValue: []byte{}}
	b, _ = r.Marshal()
	if got, err := UnmarshalReply(b); err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("reply: %+v, %v", got, err)
	}
	s1 := Success1{TID: 1, HL: 32, Response: bytes.Repeat([]byte{4}, 32)}
	b, _ = s1.Marshal()
	if got, err := UnmarshalSuccess1(b); err != nil || !reflect.DeepEqual(got, s1) {
		t.Fatalf("success1: %+v, %v", got, err)
	}
	if tid, err := UnmarshalSuccess2(MarshalSuccess2(5)); err != nil || tid != 5 {
		t.Fatalf("success2: %d, %v", tid, err)
	}
	f := Failure{ID: IDFailure1, TID: 2, Code: ReasonCodeAuthentication, Reason: ReasonFailed}
	if got, err := UnmarshalFailure(f.Marshal()); err != nil || got != f {
		t.Fatalf("failure: %+v, %v", got, err)
	}
	// A message of one kind is not decoded as another.
	if _, err := UnmarshalReply(MarshalSuccess2(5)); !errors.Is(err, ErrMessage) {
		t.Fatalf("success2 as a reply: %v", err)
	}
}

// FuzzMessages: every decoder takes any bytes without panicking, and what
// it decodes encodes to bytes it decodes to the same message.
func FuzzMessages(f *testing.F) {
	n, _ := (&Negotiate{TID: 1, Hashes: []Hash{SHA256}, Groups: []DHGroup{DHNull}}).Marshal()
	c, _ := (&Challenge{TID: 1, Hash: SHA256, C1: make([]byte, 32)}).Marshal()
	r, _ := (&Reply{TID: 1, Response: make([]byte, 32), C2: make([]byte, 32)}).Marshal()
	s1, _ := (&Success1{TID: 1, HL: 32, Response: make([]byte, 32)}).Marshal()
	for _, seed := range [][]byte{n, c, r, s1, MarshalSuccess2(1), (&Failure{ID: IDFailure2}).Marshal(), {}, {1, 2}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := UnmarshalNegotiate(b); err == nil {
			if e, err := m.Marshal(); err == nil {
				if back, err := UnmarshalNegotiate(e); err != nil || !reflect.DeepEqual(back, m) {
					t.Fatalf("negotiate %+v: %+v, %v", m, back, err)
				}
			}
		}
		if m, err := UnmarshalChallenge(b); err == nil {
			e, err := m.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if back, err := UnmarshalChallenge(e); err != nil || !reflect.DeepEqual(back, m) {
				t.Fatalf("challenge %+v: %+v, %v", m, back, err)
			}
		}
		if m, err := UnmarshalReply(b); err == nil {
			e, err := m.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if back, err := UnmarshalReply(e); err != nil || !reflect.DeepEqual(back, m) {
				t.Fatalf("reply %+v: %+v, %v", m, back, err)
			}
		}
		if m, err := UnmarshalSuccess1(b); err == nil {
			e, err := m.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if back, err := UnmarshalSuccess1(e); err != nil || !reflect.DeepEqual(back, m) {
				t.Fatalf("success1 %+v: %+v, %v", m, back, err)
			}
		}
		_, _ = UnmarshalSuccess2(b)
		if m, err := UnmarshalFailure(b); err == nil {
			if back, err := UnmarshalFailure(m.Marshal()); err != nil || back != m {
				t.Fatalf("failure %+v: %+v, %v", m, back, err)
			}
		}
	})
}

// FuzzParseSecret: any string parses or is refused with ErrSecret, and a
// parsed secret prints to a string that parses back to it.
func FuzzParseSecret(f *testing.F) {
	f.Add(Secret{Key: make([]byte, 32), Transform: SHA256}.String())
	f.Add("DHHC-1:00:")
	f.Fuzz(func(t *testing.T, s string) {
		sec, err := ParseSecret(s)
		if err != nil {
			if !errors.Is(err, ErrSecret) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		back, err := ParseSecret(sec.String())
		if err != nil || !bytes.Equal(back.Key, sec.Key) || back.Transform != sec.Transform {
			t.Fatalf("%q: %+v, %v", s, back, err)
		}
	})
}
