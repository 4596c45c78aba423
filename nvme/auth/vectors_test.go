package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"
)

// Vectors computed by an independent implementation (Python's hmac and
// hashlib) of the algorithm in Linux's drivers/nvme/common/auth.c and
// host/auth.c: nvme_auth_transform_key, the host and controller responses
// (nvme_auth_dhchap_setup_host_response, _ctrl_response) and
// nvme_auth_augmented_challenge. The key is bytes 0, 1, 2, ...; the
// challenge all A5h; S1 01020304h, S2 0A0B0C0Dh, T_ID 7; the session key
// of the augmented challenge 256 bytes of 11h.
const (
	vecHostNQN = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100"
	vecSubNQN  = "nqn.2026-11.io.nearstore:vol1"
)

var vectors = []struct {
	transform, hash                          Hash
	secret                                   string
	transformed, hostResp, ctrlResp, augment string
}{
	{0, 1, "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
		"a850c9c1616c93dbb76755e86f8f4d962b111a6b7a0d99b02bf9a3d38934e28f",
		"d56bde617acd34fcc884f4332b5e8997620d1c27b315ee6092a9bb0c43fe097b",
		"a897ff2125289e03f09acfb9bf4089b6cb4f87ad28a9a73b68fe408f4ad90685"},
	{0, 2, "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
		"689e32d6f6bcc98d2e8146adc22b5db4749266d84f3f66cbda5781577847d105c7fb964056840d18edc98dd90620b867",
		"9ffd768ef92fc75b924e49782616459c58d9edfabbf23409b626d4b6171bdd3ef863e7dad99489e10c6e13b8d2c5f176",
		"fb696461b3828b87edf84a251a8e364c2cab9d00132b08b19d6b9323fa13ec8c89364679a3ac310796a9eec28caf70a7"},
	{0, 3, "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
		"f1af271fb96c99300a2fd48848892da8bf090e8edc064ff635bfa206089d00b1cd41c4d882aa10e9f95649d892589e14414ae488eadf6a1b5d36633294eb3896",
		"87372593d3a8425023d9595f7847a51b31e00fcc6cc24784754707f2e25fda0f9fd975be1e1ec789a966f7d59e011e0a9ec91d0343713c3e30ecdfac60716b4e",
		"6e30a9d8357cf6e56a542d533aceed5044ce48a51fdac3a9ed49065bfad7a0e0c385fb6969531b3b1b9e298cd70d9382a7bc9d438f8643dde4a3a02ee809bce0"},
	{1, 1, "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
		"166d822042f045f0fbf284e3931db29827617f77a5d1615e12160de2815a9cbd",
		"dda6e13a80cb983571930e8760d9017750582573745170791af89ff6ef6e0541",
		"6d5ac3c69263c22ab76ee6753394cd99256a6f5240e70eb0c01a633f11dbd996",
		"a897ff2125289e03f09acfb9bf4089b6cb4f87ad28a9a73b68fe408f4ad90685"},
	{1, 2, "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
		"166d822042f045f0fbf284e3931db29827617f77a5d1615e12160de2815a9cbd",
		"9eb033a6a5a906d1d8c3c6f8967fe87820a8c8310e329c968ef641f20f6ccdc570e1a14d2add0c9924a74a5d1751c494",
		"19b71d714d4085f83ded20eb240c68438a7bdcdc6fb7577cc64e0dbfbfd780a6c44ad8b1b71e5611736fb75af5c0ec14",
		"fb696461b3828b87edf84a251a8e364c2cab9d00132b08b19d6b9323fa13ec8c89364679a3ac310796a9eec28caf70a7"},
	{1, 3, "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
		"166d822042f045f0fbf284e3931db29827617f77a5d1615e12160de2815a9cbd",
		"4fb3691486f442e57b20336c51ceb413a2372588c17fd667748f4def19f6322e9a30e13459e3a836e86e4e8752e7ed64df8c5ecf04e6f8430f341772e55cce36",
		"369793bff6992ee218e2e3dfd8910f927f9c01e30744e80b8ef5c5b6738593666266cc0dffb8b1e99b6d7a1ad6a0c32db72b9f16eb830f66be3dba90ab29d097",
		"6e30a9d8357cf6e56a542d533aceed5044ce48a51fdac3a9ed49065bfad7a0e0c385fb6969531b3b1b9e298cd70d9382a7bc9d438f8643dde4a3a02ee809bce0"},
	{2, 1, "DHHC-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:",
		"9bce93a80ef56e4bbf8a5beea17b6d5b391709628c5fab8b142b0b9a92d1443d74ef414fe0fdbfe5b344a577fd8d3386",
		"1336c4e77ab8b8567b98571d6b828ec1050a34b847b7715a1ae26470af3cb6ce",
		"94a2ac51fd30916edec74b6c2bc2daf038a681cf598a024523b0e4b176b1cf21",
		"a897ff2125289e03f09acfb9bf4089b6cb4f87ad28a9a73b68fe408f4ad90685"},
	{2, 2, "DHHC-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:",
		"9bce93a80ef56e4bbf8a5beea17b6d5b391709628c5fab8b142b0b9a92d1443d74ef414fe0fdbfe5b344a577fd8d3386",
		"86338b3f74d4688e19e2eeceaf183b4932cb862be86c3f2e5fe07b3b3b1272f9df9e5015e9da0d5266d1b3d40edf8ccb",
		"603a76a3ebbd6a99672ef732ad3973647558d30f84107d81893f2fc7e1ae996fd043f0e4fae44c185cc9e0985be96be0",
		"fb696461b3828b87edf84a251a8e364c2cab9d00132b08b19d6b9323fa13ec8c89364679a3ac310796a9eec28caf70a7"},
	{2, 3, "DHHC-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:",
		"9bce93a80ef56e4bbf8a5beea17b6d5b391709628c5fab8b142b0b9a92d1443d74ef414fe0fdbfe5b344a577fd8d3386",
		"a96c7ca854d63c4b6cea3c5c3279c847c6f46849af7dba9c6e72dfdf2e8337451794ae2a8bb34090ea874d96dec97cd9cc1d4992dcfdd8c75edd2ebd09f2af8a",
		"bad96dc4be1ed5eb9310cef58c5c7e1bb9af4e7fbf3303df84e9e93c482846fcf676ce24555625eedad093c5e67f1ede8516f74ec73055027cf4ccc1c8bc210b",
		"6e30a9d8357cf6e56a542d533aceed5044ce48a51fdac3a9ed49065bfad7a0e0c385fb6969531b3b1b9e298cd70d9382a7bc9d438f8643dde4a3a02ee809bce0"},
	{3, 1, "DHHC-1:03:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P4zODhA=:",
		"7ca654216065df4bd053eab24282394a53ccc87587617394d41efd694638629b9caccb1b97903a7145662b5428644aa08c14498e2192b55117bd56b3d6c705de",
		"18009b9933f13966ff43bea096fac236e01dc80f680df93712b24df455c1747c",
		"f647802cfd1413d43a69b4abaaf858380d2455c7f48ec1c5617b4da55dc539db",
		"a897ff2125289e03f09acfb9bf4089b6cb4f87ad28a9a73b68fe408f4ad90685"},
	{3, 2, "DHHC-1:03:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P4zODhA=:",
		"7ca654216065df4bd053eab24282394a53ccc87587617394d41efd694638629b9caccb1b97903a7145662b5428644aa08c14498e2192b55117bd56b3d6c705de",
		"cb94b86c46b54dfa315af89ef9d159401a96525787d2f4e9db5135ec1759c341ca52c0643519eb0e04d8e5cd2db9aae9",
		"d8f4192efcd69950533043211a2a371f83a703ff2ae5a02dc8c24392951abcaf45c711ec1b66589db830d344ca0f51c3",
		"fb696461b3828b87edf84a251a8e364c2cab9d00132b08b19d6b9323fa13ec8c89364679a3ac310796a9eec28caf70a7"},
	{3, 3, "DHHC-1:03:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P4zODhA=:",
		"7ca654216065df4bd053eab24282394a53ccc87587617394d41efd694638629b9caccb1b97903a7145662b5428644aa08c14498e2192b55117bd56b3d6c705de",
		"d257ca7d3ec733366cea4aa3f7f586188da7476b6f397ed9c4701300d65e5332cb1cc32a67abadd8fe1b0d8451000d78cd73155dfd301a63ec02ee5f6997419e",
		"f9cc5f782fcda155ce16f0469a5d0a8a51b1d5b7bc074a2fc1b4cd5427a69ec0f94f39ff09ad39463444ee7b02c21faaa132521027d74155e47dd73584ab0b7f",
		"6e30a9d8357cf6e56a542d533aceed5044ce48a51fdac3a9ed49065bfad7a0e0c385fb6969531b3b1b9e298cd70d9382a7bc9d438f8643dde4a3a02ee809bce0"},
}

func TestVectors(t *testing.T) {
	for _, v := range vectors {
		s, err := ParseSecret(v.secret)
		if err != nil {
			t.Fatalf("%s: %v", v.secret, err)
		}
		if s.Transform != v.transform || s.String() != v.secret {
			t.Fatalf("%s: parsed as %d, prints %s", v.secret, s.Transform, s)
		}
		hk, err := s.TransformedKey(vecHostNQN)
		if err != nil || hex.EncodeToString(hk) != v.transformed {
			t.Fatalf("%s: transformed key %x, %v; want %s", v.secret, hk, err, v.transformed)
		}
		ck, _ := s.TransformedKey(vecSubNQN)
		c := bytes.Repeat([]byte{0xA5}, v.hash.Size())
		e := Exchange{Hash: v.hash, TID: 7, HostNQN: vecHostNQN, SubNQN: vecSubNQN}
		if r, err := e.HostResponse(hk, c, 0x01020304); err != nil || hex.EncodeToString(r) != v.hostResp {
			t.Errorf("%s %s: host response %x, %v; want %s", v.secret, v.hash, r, err, v.hostResp)
		}
		if r, err := e.ControllerResponse(ck, c, 0x0A0B0C0D); err != nil || hex.EncodeToString(r) != v.ctrlResp {
			t.Errorf("%s %s: controller response %x, %v; want %s", v.secret, v.hash, r, err, v.ctrlResp)
		}
		if a, err := Augment(v.hash, bytes.Repeat([]byte{0x11}, 256), c); err != nil || hex.EncodeToString(a) != v.augment {
			t.Errorf("%s: augmented challenge %x, %v; want %s", v.hash, a, err, v.augment)
		}
	}
}

// rfc7919FFDHE2048 is the ffdhe2048 prime as RFC 7919 appendix A.1 lists it.
const rfc7919FFDHE2048 = "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695a9e13641146433fbcc939dce249b3ef97d2fe363630c75d8f681b202aec4617ad3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797abc0ab182b324fb61d108a94bb2c8e3fbb96adab760d7f4681d4f42a3de394df4ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f619172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005c58ef1837d1683b2c6f34a26c1b2effa886b423861285c97ffffffffffffffff"

// TestPrimes: the primes derived from RFC 7919's formula are the RFC's
// (the 2048-bit listing), every p is a safe prime, and each has the size
// the formula gives.
func TestPrimes(t *testing.T) {
	if got := FFDHE2048.Prime().Text(16); got != rfc7919FFDHE2048 {
		t.Fatalf("ffdhe2048 derived as %s", got)
	}
	for _, g := range AllGroups[1:] {
		p := g.Prime()
		if p.BitLen() != g.Bits() || g.ValueSize()*8 != g.Bits() {
			t.Fatalf("%s: %d bits", g, p.BitLen())
		}
		if g.Bits() > 4096 {
			// Safe-prime tests of 6144 and 8192 bits take seconds; their
			// derivation is the one the 2048-bit listing checks.
			continue
		}
		q := new(big.Int).Rsh(p, 1)
		if !p.ProbablyPrime(0) || !q.ProbablyPrime(0) {
			t.Fatalf("%s: p or (p-1)/2 is not prime", g)
		}
	}
}

// TestDHVector: fixed exponents give the public values and shared secret
// Python's pow computes in ffdhe2048.
func TestDHVector(t *testing.T) {
	xa, _ := new(big.Int).SetString("80"+strings.Repeat("11", 63), 16)
	xb, _ := new(big.Int).SetString("80"+strings.Repeat("22", 63), 16)
	p := FFDHE2048.Prime()
	a := &KeyPair{Group: FFDHE2048, x: xa, Public: new(big.Int).Exp(big.NewInt(2), xa, p).FillBytes(make([]byte, 256))}
	yb := new(big.Int).Exp(big.NewInt(2), xb, p).FillBytes(make([]byte, 256))
	if got := sha256.Sum256(a.Public); hex.EncodeToString(got[:]) != "13d77572ddce2e54968e2bfe625a0199161031b56b60197d8981c7fa9f50f6dc" {
		t.Fatalf("public value hashes to %x", got)
	}
	if hex.EncodeToString(yb) != "c259a8f9ae8787cff052a5c271ad9b3dcd3eecd01f334321b753ea5f119779f1538e959df01e4b33561cb22554ba7b7a7c2211b9e37dc1a6b6104c86b2ad4197766c475317a0b2d9529199d0284ea24bc5d7af9dd21ae7475d0b5f9106d832491609afd0acc97723ab6e3205428ab2896b1fef70c2e4b77c6b3e2f04c71745a4ac66a84b84af5ab46628c23ccc5ddfef1e87ddab8618edf282327edfb958c67f55fb34d9925697ece26655713c21a094f845214463788022d77c71d98ff0745194ed8b3f64c4b5e7b81d56cc6232954d2f4ba2ebcd2aa18544730c2ba8b0ba845553edf9759d3b84978e788546660f959d8d339f7b489e96c96cb111cb805764" {
		t.Fatalf("public value %x", yb)
	}
	z, err := a.Shared(yb)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(z); hex.EncodeToString(got[:]) != "99c25913c4b222339bd18090c270306970168d98569c02640d465060069bb32e" {
		t.Fatalf("shared secret hashes to %x", got)
	}
}

// TestGenerateSecretNVMeCLI: the secrets nvme-cli 2.3 prints for
// `nvme gen-dhchap-key --secret=<bytes 0, 1, 2, ...> --hmac=N
// --nqn=vecHostNQN`, which GenerateSecret must print from the same bytes.
func TestGenerateSecretNVMeCLI(t *testing.T) {
	for _, tc := range []struct {
		t    Hash
		n    int
		want string
	}{
		{0, 32, "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"},
		{SHA256, 32, "DHHC-1:01:Fm2CIELwRfD78oTjkx2ymCdhf3el0WFeEhYN4oFanL0eoJ69:"},
		{SHA384, 48, "DHHC-1:02:m86TqA71bku/ilvuoXttWzkXCWKMX6uLFCsLmpLRRD1070FP4P2/5bNEpXf9jTOGI4TYkA==:"},
		{SHA512, 64, "DHHC-1:03:fKZUIWBl30vQU+qyQoI5SlPMyHWHYXOU1B79aUY4YpucrMsbl5A6cUVmK1QoZEqgjBRJjiGStVEXvVaz1scF3rXwqYQ=:"},
	} {
		raw := make([]byte, tc.n)
		for i := range raw {
			raw[i] = byte(i)
		}
		s, err := GenerateSecret(bytes.NewReader(raw), tc.t, tc.n, vecHostNQN)
		if err != nil || s.String() != tc.want {
			t.Errorf("%s: %s, %v; nvme-cli prints %s", tc.t, s, err, tc.want)
		}
	}
}
