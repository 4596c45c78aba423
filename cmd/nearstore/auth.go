package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/target"
)

// newAuthCmd is `nearstore auth`: DH-HMAC-CHAP secrets.
func newAuthCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "auth", Short: "DH-HMAC-CHAP in-band authentication secrets"}
	var (
		hmacID, keyLen int
		nqn            string
	)
	gen := &cobra.Command{
		Use:   "gen-key",
		Short: "Print a new DH-HMAC-CHAP secret (DHHC-1), as nvme gen-dhchap-key does",
		Long: `gen-key prints a random secret in the DHHC-1 form that nvme-cli's
gen-dhchap-key writes and Linux, nvme-cli and nearstore read. With --hmac
1, 2 or 3 the random key is first transformed with HMAC-SHA-256, -384 or
-512 for --nqn (default: this host's NQN), and the key length must be 32,
48 or 64 bytes to match.`,
		Example: `  nearstore auth gen-key
  nearstore auth gen-key --hmac 1 --nqn nqn.2014-08.org.nvmexpress:uuid:...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hmacID < 0 || hmacID > 3 {
				return usageErrorf("--hmac %d: want 0 (none), 1 (SHA-256), 2 (SHA-384) or 3 (SHA-512)", hmacID)
			}
			t := auth.Hash(hmacID)
			if keyLen == 0 {
				keyLen = 32
				if t != 0 {
					keyLen = t.Size()
				}
			}
			if t != 0 && nqn == "" {
				id, err := host.SystemIdentity()
				if err != nil {
					return usageErrorf("--hmac %d transforms the key for an NQN, and this host has none: give --nqn (%v)", hmacID, err)
				}
				nqn = id.NQN
			}
			s, err := auth.GenerateSecret(rand.Reader, t, keyLen, nqn)
			if err != nil {
				return usageErrorf("%v", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), s.String())
			return nil
		},
	}
	f := gen.Flags()
	f.IntVar(&hmacID, "hmac", 0, "transformation: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512")
	f.IntVar(&keyLen, "key-length", 0, "key bytes: 32, 48 or 64 (default 32, or the --hmac hash's size)")
	f.StringVar(&nqn, "nqn", "", "the NQN a transformed key is for (default: this host's)")
	cmd.AddCommand(gen)
	return cmd
}

// readSecret resolves a secret flag value: "@PATH" reads it from a file
// (the file's first line), anything else is the DHHC-1 secret itself.
// The result is checked here, so a typo is a usage error at start.
func readSecret(flag, v string) (string, error) {
	if path, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", usageErrorf("%s: %v", flag, err)
		}
		v, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
		v = strings.TrimSpace(v)
	}
	if _, err := auth.ParseSecret(v); err != nil {
		return "", usageErrorf("%s: %v", flag, err)
	}
	return v, nil
}

// targetSecrets turns target serve's repeatable --dhchap-secret and
// --dhchap-ctrl-secret HOSTNQN=SECRET flags into the subsystem's table.
// A host named must be one that may connect: one of allowHosts, or any
// host with allowAny or with no --allow-host (loopback).
func targetSecrets(secrets, ctrlSecrets, allowHosts []string, allowAny bool) (map[string]target.DHCHAPKeys, error) {
	keys := make(map[string]target.DHCHAPKeys)
	allowed := func(nqn string) bool {
		if allowAny || len(allowHosts) == 0 {
			return true
		}
		for _, h := range allowHosts {
			if h == nqn {
				return true
			}
		}
		return false
	}
	parse := func(flag, v string) (string, string, error) {
		nqn, sec, ok := strings.Cut(v, "=")
		if !ok || nqn == "" || sec == "" {
			return "", "", usageErrorf("%s %q: want HOSTNQN=DHHC-1:... or HOSTNQN=@FILE", flag, v)
		}
		if !allowed(nqn) {
			return "", "", usageErrorf("%s: host %s is not allowed to connect: add --allow-host %s (or --allow-any-host)", flag, nqn, nqn)
		}
		s, err := readSecret(flag, sec)
		return nqn, s, err
	}
	for _, v := range secrets {
		nqn, s, err := parse("--dhchap-secret", v)
		if err != nil {
			return nil, err
		}
		if keys[nqn].Secret != "" {
			return nil, usageErrorf("--dhchap-secret: host %s named twice", nqn)
		}
		k := keys[nqn]
		k.Secret = s
		keys[nqn] = k
	}
	for _, v := range ctrlSecrets {
		nqn, s, err := parse("--dhchap-ctrl-secret", v)
		if err != nil {
			return nil, err
		}
		k, ok := keys[nqn]
		if !ok {
			return nil, usageErrorf("--dhchap-ctrl-secret: host %s has no --dhchap-secret (bidirectional authentication authenticates the host too)", nqn)
		}
		if k.CtrlSecret != "" {
			return nil, usageErrorf("--dhchap-ctrl-secret: host %s named twice", nqn)
		}
		k.CtrlSecret = s
		keys[nqn] = k
	}
	return keys, nil
}

// parseHashes and parseGroups read --dhchap-hash and --dhchap-dhgroup
// lists ("sha256,sha384", "null,ffdhe2048").
func parseHashes(vs []string) ([]auth.Hash, error) {
	var hs []auth.Hash
	for _, v := range vs {
		switch strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(v), "hmac("), ")"), "sha-") {
		case "sha256", "256":
			hs = append(hs, auth.SHA256)
		case "sha384", "384":
			hs = append(hs, auth.SHA384)
		case "sha512", "512":
			hs = append(hs, auth.SHA512)
		default:
			return nil, usageErrorf("--dhchap-hash %q: want sha256, sha384 or sha512", v)
		}
	}
	return hs, nil
}

func parseGroups(vs []string) ([]auth.DHGroup, error) {
	var gs []auth.DHGroup
	for _, v := range vs {
		found := false
		for _, g := range auth.AllGroups {
			if strings.EqualFold(v, g.String()) {
				gs = append(gs, g)
				found = true
			}
		}
		if !found {
			return nil, usageErrorf("--dhchap-dhgroup %q: want null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144 or ffdhe8192", v)
		}
	}
	return gs, nil
}
