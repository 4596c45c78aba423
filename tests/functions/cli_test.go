package functions_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testfuncs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testproc"
	"github.com/nearstore/nearstore/sandbox"
)

// cli runs the nearstore binary.
type cli struct {
	t    *testing.T
	bin  string
	addr string
	nqn  string
}

// run runs `nearstore args...` against the target and returns its stdout,
// stderr and exit error.
func (c *cli) run(args ...string) (stdout, stderr string, err error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if len(args) >= 2 && args[0] == "func" {
		args = append(args, "--addr", c.addr, "--nqn", c.nqn)
	}
	cmd := exec.CommandContext(ctx, c.bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// ok runs a command that must succeed and returns its stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("nearstore %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// fails runs a command that must fail and returns its stderr.
func (c *cli) fails(args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(args...)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		c.t.Fatalf("nearstore %s: %v, want exit status 1\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return errOut
}

// listEntry is one function of `nearstore func list --json`.
type listEntry struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Pushdown bool   `json:"pushdown"`
	Compute  bool   `json:"compute"`
	Bytes    int    `json:"bytes"`
	Calls    uint64 `json:"calls"`
}

func (c *cli) list() map[string]listEntry {
	c.t.Helper()
	var es []listEntry
	if err := json.Unmarshal([]byte(c.ok("func", "list", "--json")), &es); err != nil {
		c.t.Fatal(err)
	}
	m := map[string]listEntry{}
	for _, e := range es {
		m[e.ID] = e
	}
	return m
}

// callResult is `nearstore func call --json`'s output.
type callResult struct {
	Steps     uint32 `json:"steps"`
	Reads     uint32 `json:"reads"`
	BytesRead uint64 `json:"bytes_read"`
	Output    string `json:"output_hex"`
}

func (c *cli) call(args ...string) (callResult, []byte) {
	c.t.Helper()
	var r callResult
	if err := json.Unmarshal([]byte(c.ok(append([]string{"func", "call"}, args...)...)), &r); err != nil {
		c.t.Fatal(err)
	}
	out, err := hex.DecodeString(r.Output)
	if err != nil {
		c.t.Fatal(err)
	}
	return r, out
}

// TestCLI drives the real binary: `nearstore target serve` as its own
// process on a file volume prepared with a B+-tree, numbers, text and room
// for a λ write; then `nearstore func load`, `func list`, `func call` in
// each mode and `func unload`, checking their output against the Go
// references, and the served target's metrics for the one command a
// pushdown costs.
func TestCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nearstore")
	build := exec.Command("go", "build", "-o", bin, "github.com/nearstore/nearstore/cmd/nearstore")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The volume: the tree's index at 1 MiB and values at 4 MiB, u64s at
	// 6 MiB, text at 7 MiB, the λ write's range at 8 MiB.
	const (
		indexOff = 1 << 20
		valueOff = 4 << 20
		numsOff  = 6 << 20
		textOff  = 7 << 20
		writeOff = 8 << 20
	)
	rng := rand.New(rand.NewPCG(12, 13))
	keys := sortedKeys(rng, 3000)
	index, values := functions.BuildBTreeFanout(keys, functions.DefaultValueSize, 5)
	nums := u64s(rng, 4096)
	text := []byte("one needle\ntwo\nthree needles\nfour\n")
	img := make([]byte, nsSize)
	for i := range img[writeOff-bs : writeOff+5*bs] {
		img[writeOff-bs+i] = stampByte(int64(writeOff - bs + i))
	}
	copy(img[indexOff:], index)
	copy(img[valueOff:], values)
	copy(img[numsOff:], nums)
	copy(img[textOff:], text)
	volPath := filepath.Join(dir, "vol.img")
	if err := os.WriteFile(volPath, img, 0o644); err != nil {
		t.Fatal(err)
	}

	// The target, as its own process.
	const nqn = "nqn.2026-11.io.nearstore:cli-e2e"
	srv := exec.Command(bin, "target", "serve", "--listen", "127.0.0.1:0", "--nqn", nqn,
		"--volume", "file:"+volPath, "--metrics", "127.0.0.1:0")
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := testproc.Start(t, srv)
	addrc, metricsc := make(chan string, 1), make(chan string, 1)
	var logs bytes.Buffer
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`url=(http://\S+/metrics)`)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				metricsc <- m[1]
			}
		}
	}()
	go func() {
		re := regexp.MustCompile(`^serving \S+ on (\S+) `)
		for line := range p.Lines {
			if m := re.FindStringSubmatch(line); m != nil {
				addrc <- m[1]
			}
		}
	}()
	var addr, metricsURL string
	for addr == "" || metricsURL == "" {
		select {
		case addr = <-addrc:
		case metricsURL = <-metricsc:
		case <-p.Done():
			<-logsDone
			t.Fatalf("the target exited: %v\n%s", p.Cmd.ProcessState, logs.String())
		case <-time.After(30 * time.Second):
			t.Fatal("the target did not report its address")
		}
	}
	c := &cli{t: t, bin: bin, addr: addr, nqn: nqn}

	// func load: the ID is the module's SHA-256.
	ids := map[string]string{}
	for _, m := range []struct {
		name string
		kind sandbox.Kind
		path string
	}{
		{"btree_lookup", sandbox.KindWasm, "../../functions/wasm/btree_lookup.wasm"},
		{"stats64", sandbox.KindEBPF, "../../functions/ebpf/stats64.o"},
		{"grep", sandbox.KindWasm, "../../functions/wasm/grep.wasm"},
		{"bitmap", sandbox.KindEBPF, "../../functions/ebpf/bitmap.o"},
	} {
		mod, err := functions.Module(m.name, m.kind)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSpace(c.ok("func", "load", m.path))
		if id != sandbox.IDOf(mod).String() {
			t.Fatalf("func load %s printed %q, want its ID %s", m.path, id, sandbox.IDOf(mod))
		}
		ids[m.name] = id
	}

	// func list: all four, with their names (standard functions), kinds
	// and entry points, no calls.
	table := c.ok("func", "list")
	if !strings.HasPrefix(table, "ID") {
		t.Errorf("func list: no header:\n%s", table)
	}
	for name, id := range ids {
		if !regexp.MustCompile(id + `\s+` + name + `\s+(wasm|ebpf)\s+`).MatchString(table) {
			t.Errorf("func list does not show %s (%s):\n%s", name, id, table)
		}
	}
	l := c.list()
	if len(l) != 4 || l[ids["btree_lookup"]].Kind != "wasm" || !l[ids["btree_lookup"]].Pushdown ||
		l[ids["stats64"]].Kind != "ebpf" || !l[ids["stats64"]].Compute || l[ids["bitmap"]].Calls != 0 {
		t.Errorf("func list --json: %+v", l)
	}

	// A refused module: func load says why, naming the rule and the
	// programs it saw, and nothing is loaded.
	errOut := c.fails("func", "load", "../../sandbox/ebpf/testdata/xrp_two.o")
	for _, want := range []string{"function rejected", "2 programs could be the pushdown entry",
		`"get" (section "xrp/get")`, `"range" (section "xrp/range")`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("func load of a two-program object: %q does not say %q", errOut, want)
		}
	}
	if l := c.list(); len(l) != 4 {
		t.Errorf("after a refused load, %d functions are loaded, want 4", len(l))
	}

	// func call --mode pushdown: a lookup in the tree, one command.
	scrape := func() string {
		resp, err := http.Get(metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	key := keys[rng.IntN(len(keys))]
	scratch := make([]byte, sandbox.ScratchSize)
	functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: functions.DefaultValueSize}.Encode(scratch)
	paramsPath := filepath.Join(dir, "scratch.bin")
	if err := os.WriteFile(paramsPath, scratch, 0o644); err != nil {
		t.Fatal(err)
	}
	steps, err := functions.RunPushdown(functions.BTreeStep, scratch, [][]byte{index, values},
		sandbox.Next{Len: functions.NodeSize}, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, out := c.call(ids["btree_lookup"], "--mode", "pushdown", "--json", "--params", paramsPath,
		"--file", fmt.Sprintf("%d:%d", indexOff, len(index)), "--file", fmt.Sprintf("%d:%d", valueOff, len(values)),
		"--start-file", "0", "--offset", "0", "--length", strconv.Itoa(functions.NodeSize))
	if !bytes.Equal(out, scratch) {
		t.Errorf("pushdown: the scratch returned differs from the host-side lookup's")
	}
	if got, _ := functions.ParseBTreeResult(out); got.Status != functions.BTreeFound || !bytes.Equal(got.Value, functions.BTreeValue(key, functions.DefaultValueSize)) {
		t.Errorf("pushdown lookup of %d: status %d value %x", key, got.Status, got.Value)
	}
	if int(res.Steps) != steps || res.Reads != res.Steps || steps < 5 {
		t.Errorf("pushdown: %d steps and %d reads, want %d of each", res.Steps, res.Reads, steps)
	}
	// The target counts a command before its completion leaves.
	onePushdown := regexp.MustCompile(`nearstore_target_commands_total\{[^}]*op="pushdown",result="ok"[^}]*\} 1\n`)
	metrics := scrape()
	if !onePushdown.MatchString(metrics) || strings.Contains(metrics, `op="read"`) {
		t.Errorf("the target's metrics do not show exactly one pushdown command and no reads:\n%s", grepLines(metrics, "nearstore_target_commands_total"))
	}

	// func call --mode lambda-read: stats64 over the numbers.
	_, out = c.call(ids["stats64"], "--mode", "lambda-read", "--json", "--offset", strconv.Itoa(numsOff),
		"--length", strconv.Itoa(len(nums)), "--out-cap", "32")
	if want := testfuncs.Native(t, "stats64", nums, 32); !bytes.Equal(out, want) {
		t.Errorf("lambda-read stats64: %x, want %x", out, want)
	}
	// The same without --json: decoded (it is a standard function) on
	// stdout, counters on stderr; with --hex, the bytes.
	o, _, err := c.run("func", "call", ids["stats64"], "--mode", "lambda-read", "--offset", strconv.Itoa(numsOff),
		"--length", strconv.Itoa(len(nums)), "--out-cap", "32")
	st, _ := functions.ParseStats(testfuncs.Native(t, "stats64", nums, 32))
	if want := fmt.Sprintf("count %d\nsum %d\nmin %d\nmax %d\n", st.Count, st.Sum, st.Min, st.Max); err != nil || o != want {
		t.Errorf("lambda-read, decoded: %v\nstdout: %s\nwant: %s", err, o, want)
	}
	o, e, err := c.run("func", "call", ids["stats64"], "--mode", "lambda-read", "--offset", strconv.Itoa(numsOff),
		"--length", strconv.Itoa(len(nums)), "--out-cap", "32", "--hex")
	if err != nil || strings.TrimSpace(o) != hex.EncodeToString(testfuncs.Native(t, "stats64", nums, 32)) ||
		!strings.Contains(e, fmt.Sprintf("bytes read %d, one command", len(nums))) {
		t.Errorf("lambda-read without --json: %v\nstdout: %s\nstderr: %s", err, o, e)
	}
	// grep with its pattern as --params; then an output buffer too small:
	// the function's own error code, and exit status 1.
	grepParams := filepath.Join(dir, "grep.bin")
	if err := os.WriteFile(grepParams, functions.EncodeGrep([]byte("needle"), nil), 0o644); err != nil {
		t.Fatal(err)
	}
	_, out = c.call(ids["grep"], "--mode", "lambda-read", "--json", "--params", grepParams,
		"--file", fmt.Sprintf("%d:%d", textOff, len(text)), "--length", strconv.Itoa(len(text)))
	if string(out) != "one needle\nthree needles\n" {
		t.Errorf("lambda-read grep: %q", out)
	}
	msg := c.fails("func", "call", ids["grep"], "--mode", "lambda-read", "--params", grepParams,
		"--file", fmt.Sprintf("%d:%d", textOff, len(text)), "--length", strconv.Itoa(len(text)), "--out-cap", "8")
	if !strings.Contains(msg, fmt.Sprintf("the function returned error %d", functions.ERANGE)) {
		t.Errorf("grep into 8 bytes: %q", msg)
	}

	// func call --mode lambda-write: bitmap writes its expansion, and only
	// the blocks it covers.
	bitmap := make([]byte, 1500)
	for i := range bitmap {
		bitmap[i] = byte(rng.Uint32())
	}
	runs := functions.EncodeBitmap(bitmap, len(bitmap)*8)
	runsPath := filepath.Join(dir, "runs.bin")
	if err := os.WriteFile(runsPath, runs, 0o644); err != nil {
		t.Fatal(err)
	}
	o = c.ok("func", "call", ids["bitmap"], "--mode", "lambda-write", "--data", runsPath,
		"--offset", strconv.Itoa(writeOff), "--length", strconv.Itoa(4*bs))
	if want := fmt.Sprintf("wrote %d bytes at offset %d of file 0\n", len(bitmap), writeOff); o != want {
		t.Errorf("lambda-write printed %q, want %q", o, want)
	}
	ctrl, ns := testhost.Connect(t, addr, nqn, 1, host.Options{KeepAlive: -1})
	got := make([]byte, 6*bs)
	if _, err := ns.ReadAt(got, writeOff-bs); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(img[writeOff-bs : writeOff+5*bs])
	copy(want[bs:], bitmap)
	clear(want[bs+len(bitmap) : bs+3*bs]) // padding to the block
	if !bytes.Equal(got, want) {
		t.Errorf("after lambda-write the namespace does not hold the bitmap, padded to a block, and the stamp around it")
	}

	// func list counts the calls.
	l = c.list()
	for name, n := range map[string]uint64{"btree_lookup": 1, "stats64": 3, "grep": 2, "bitmap": 1} {
		if l[ids[name]].Calls != n {
			t.Errorf("func list: %s has %d calls, want %d", name, l[ids[name]].Calls, n)
		}
	}

	// func unload, then the ID is gone.
	if o := c.ok("func", "unload", ids["btree_lookup"]); o != "" {
		t.Errorf("func unload printed %q", o)
	}
	if _, ok := c.list()[ids["btree_lookup"]]; ok {
		t.Error("func list still shows the unloaded function")
	}
	if msg := c.fails("func", "unload", ids["btree_lookup"]); !strings.Contains(msg, "function not found") {
		t.Errorf("unloading twice: %q", msg)
	}
	if msg := c.fails("func", "call", ids["btree_lookup"], "--params", paramsPath); !strings.Contains(msg, "function not found") {
		t.Errorf("calling an unloaded function: %q", msg)
	}
	if o, msg, err := c.run("func", "unload", "not-an-id"); !strings.Contains(msg, "64 hex digits") || err == nil {
		t.Errorf("unload of a malformed ID: %v %q %q", err, o, msg) // a usage error: exit 2
	}
	if msg := c.fails("func", "load", filepath.Join("testdata", "badhelper.o")); !strings.Contains(msg, "function rejected") {
		t.Errorf("loading a module the verifier refuses: %q", msg)
	}

	// SIGINT: the target shuts down cleanly.
	ctrl.Close()
	if err := srv.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if st := p.Cmd.ProcessState; !st.Success() {
		<-logsDone
		t.Errorf("the target exited with %v\n%s", st, logs.String())
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
