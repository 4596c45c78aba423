// Package interop boots a stock Debian Linux kernel under QEMU (TCG, no KVM
// needed) to test nearstore's NVMe/TCP target and host against Linux's own:
//
//   - the guest's kernel NVMe/TCP host (nvme-tcp + nvme-cli) against a target
//     on this machine (scenario "host-to-ours"), and
//   - a host on this machine against the guest's kernel target (nvmet-tcp,
//     scenario "ours-to-linux"), reached through a QEMU hostfwd port.
//
// setup.sh installs QEMU and the guest's tools with apt-get and fetches the
// Debian kernel into .cache/; mkinitramfs.sh builds the guest's initramfs
// from busybox-static, nvme-cli, e2fsprogs, the kernel's modules and the
// scenario scripts in guest/. Scenarios report on the serial console with
// INTEROP-* lines (see guest/lib.sh) that Guest.WaitFor and Guest.Wait parse.
//
// Inside the guest, 10.0.2.2 is this machine's 127.0.0.1 (QEMU user-net), so
// a target listening on 127.0.0.1:PORT here is reached by the guest at
// 10.0.2.2:PORT.
//
// Tests call Require first: it skips under -short, skips when the guest
// cannot be prepared (no root to install packages, no network), but fails
// when CI=true, where the guest must always be available.
package interop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Guest-side constants of the scenarios.
const (
	// GuestGateway is the host machine's 127.0.0.1 as seen from the guest.
	GuestGateway = "10.0.2.2"
	// GuestNVMePort is the port the guest's nvmet-tcp listens on.
	GuestNVMePort = 4420
	// GuestControlPort is the ours-to-linux scenario's control port (see Guest.Control).
	GuestControlPort = 4421
)

// Kernel names a guest kernel setup.sh can prepare (its SUITE argument).
type Kernel string

const (
	// KernelDefault is the linux-image-amd64 of the system's own apt
	// sources: on Debian 12, 6.1, built without CONFIG_NVME_AUTH.
	KernelDefault Kernel = ""
	// KernelTrixie is Debian 13's linux-image-amd64 (6.12), fetched from
	// suite trixie of the same archive. It has NVME_AUTH=m,
	// NVME_HOST_AUTH=y and NVME_TARGET_AUTH=y, so its guests can run
	// DH-HMAC-CHAP (the auth-* scenarios). The guest's userland is the same.
	KernelTrixie Kernel = "trixie"
)

// String names the kernel for logs: "default" or the suite.
func (k Kernel) String() string {
	if k == KernelDefault {
		return "default"
	}
	return string(k)
}

// Env is what setup.sh prepared.
type Env struct {
	KernelVersion string // e.g. 6.1.0-56-amd64
	Kernel        string // path of vmlinuz
	Initrd        string // path of the initramfs
	QEMU          string // path of qemu-system-x86_64
}

// preparation is one kernel's setup.sh run, done at most once per process.
type preparation struct {
	once sync.Once
	env  Env
	err  error
}

// preparations has one entry per known Kernel; the map itself is never
// written after initialization.
var preparations = map[Kernel]*preparation{
	KernelDefault: {},
	KernelTrixie:  {},
}

// Dir is the directory holding setup.sh, the guest scripts and .cache/.
// NEARSTORE_INTEROP_DIR overrides it; by default it is this source file's
// directory.
func Dir() string {
	if d := os.Getenv("NEARSTORE_INTEROP_DIR"); d != "" {
		return d
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Dir(file)
}

// Prepare prepares the default kernel: PrepareKernel(KernelDefault).
func Prepare() (Env, error) { return PrepareKernel(KernelDefault) }

// PrepareKernel runs `setup.sh [SUITE]` for k once per process and returns
// its result. The first call can take a minute (apt-get install, kernel
// download, initramfs build); later runs of setup.sh take about a second.
func PrepareKernel(k Kernel) (Env, error) {
	p, ok := preparations[k]
	if !ok {
		return Env{}, fmt.Errorf("interop: unknown kernel %q", string(k))
	}
	p.once.Do(func() { p.env, p.err = runSetup(k) })
	return p.env, p.err
}

// Available reports whether a guest of the default kernel can be booted:
// AvailableKernel(KernelDefault).
func Available() error { return AvailableKernel(KernelDefault) }

// AvailableKernel reports whether a guest of kernel k can be booted: nil if
// QEMU, the kernel and the initramfs are ready (running setup.sh once per
// process), else the reason.
func AvailableKernel(k Kernel) error {
	_, err := PrepareKernel(k)
	return err
}

func runSetup(k Kernel) (Env, error) {
	script := filepath.Join(Dir(), "setup.sh")
	if _, err := os.Stat(script); err != nil {
		return Env{}, fmt.Errorf("interop: %w", err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return Env{}, fmt.Errorf("interop: bash not found: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	args := []string{script}
	if k != KernelDefault {
		args = append(args, string(k))
	}
	cmd := exec.CommandContext(ctx, "bash", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.Stdin = nil
	if err := cmd.Run(); err != nil {
		return Env{}, fmt.Errorf("interop: setup.sh %s: %v\n%s", k, err, tail(stderr.String(), 30))
	}
	var env Env
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch k {
		case "KERNEL_VERSION":
			env.KernelVersion = v
		case "KERNEL":
			env.Kernel = v
		case "INITRD":
			env.Initrd = v
		case "QEMU":
			env.QEMU = v
		}
	}
	if env.Kernel == "" || env.Initrd == "" || env.QEMU == "" {
		return Env{}, fmt.Errorf("interop: setup.sh printed no KERNEL/INITRD/QEMU:\n%s", stdout.String())
	}
	for _, f := range []string{env.Kernel, env.Initrd, env.QEMU} {
		if _, err := os.Stat(f); err != nil {
			return Env{}, fmt.Errorf("interop: %w", err)
		}
	}
	return env, nil
}

// InCI reports whether the CI environment variable says this is a CI run,
// where an unavailable guest is a failure rather than a skip.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "0" && v != "false"
}

// Require skips t under -short, and when no guest of the default kernel
// can be prepared, except in CI (CI=true), where that fails t.
func Require(t testing.TB) {
	t.Helper()
	RequireKernel(t, KernelDefault)
}

// RequireKernel is Require for a guest of kernel k; boot it with
// BootOptions.Kernel = k.
func RequireKernel(t testing.TB, k Kernel) {
	t.Helper()
	if testing.Short() {
		t.Skip("interop: QEMU guest tests are skipped with -short")
	}
	if err := AvailableKernel(k); err != nil {
		if InCI() {
			t.Fatalf("interop: %s guest unavailable in CI: %v", k, err)
		}
		t.Skipf("interop: %s guest unavailable: %v", k, err)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var errNoResult = errors.New("interop: guest stopped without an INTEROP-RESULT line")
