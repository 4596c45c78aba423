package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIdentityUnder(t *testing.T) {
	const u = "4d9a1c2e-0b7f-4e21-9a3c-5f6e7d8c9b0a"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		wantNQN string
		wantID  string // hex, no dashes; "" to skip
		wantErr string
	}{
		{"nvme-cli files", map[string]string{HostNQNFile: "nqn.2014-08.org.example:host1\n", HostIDFile: u + "\n"},
			"nqn.2014-08.org.example:host1", strings.ReplaceAll(u, "-", ""), ""},
		{"uuid nqn, no hostid", map[string]string{HostNQNFile: "nqn.2014-08.org.nvmexpress:uuid:" + u},
			"nqn.2014-08.org.nvmexpress:uuid:" + u, strings.ReplaceAll(u, "-", ""), ""},
		{"other nqn, no hostid", map[string]string{HostNQNFile: "nqn.2014-08.org.example:host1"}, "", "", "names no UUID"},
		{"bad hostid", map[string]string{HostNQNFile: "nqn.x", HostIDFile: "zz"}, "", "", "want a UUID"},
		{"empty hostnqn", map[string]string{HostNQNFile: "\n"}, "", "", "is empty"},
		{"machine-id", map[string]string{machineID: "0123456789abcdef0123456789abcdef\n"}, "nqn.2014-08.org.nvmexpress:uuid:", "", ""},
		{"nothing", nil, "", "", "no /etc/nvme/hostnqn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			id, err := identityUnder(root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(id.NQN, tc.wantNQN) || (tc.wantID != "" && uuidString(id.ID) != uuidString(mustID(t, tc.wantID))) {
				t.Fatalf("got %s %x, want %s %s", id.NQN, id.ID, tc.wantNQN, tc.wantID)
			}
			// Stable: the same files give the same identity.
			again, _ := identityUnder(root)
			if again.NQN != id.NQN || again.ID != id.ID {
				t.Fatalf("not stable: %v then %v", id, again)
			}
			if tc.name == "machine-id" && id.NQN != "nqn.2014-08.org.nvmexpress:uuid:"+uuidString(id.ID) {
				t.Fatalf("derived NQN %s does not carry its ID %x", id.NQN, id.ID)
			}
		})
	}
}

func mustID(t *testing.T, s string) [16]byte {
	id, err := ParseHostID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
