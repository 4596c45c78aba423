// Package ycsb is the Yahoo! Cloud Serving Benchmark's workload model,
// for any key-value benchmark: record keys, the key choosers (uniform,
// scrambled zipfian, latest) and the standard core workloads A–F as
// operation mixes.
//
// It follows YCSB's CoreWorkload: record i's key is "user" followed by a
// hash of i, so a load inserts in random key order and inserted records
// land anywhere in the key space; zipfian is Gray et al.'s generator
// (θ 0.99), scrambled by the same hash so popular keys are spread out.
package ycsb

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
)

// Hash is FNV-1a over v's eight little-endian bytes: YCSB's key
// scrambling.
func Hash(v uint64) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	h.Write(b[:])
	return h.Sum64()
}

// KeyLen is the length of every Key.
const KeyLen = 24

// Key is record i's key: "user" and Hash(i) in 20 decimal digits, so
// keys all have KeyLen bytes and sort in the order of their hashes.
func Key(i uint64) []byte { return []byte(fmt.Sprintf("user%020d", Hash(i))) }

// Chooser picks the record an operation addresses. Implementations are
// safe for concurrent use; each goroutine passes its own *rand.Rand.
type Chooser interface {
	Next(r *rand.Rand) uint64
}

// Uniform chooses among records [0, N) evenly.
type Uniform struct{ N uint64 }

// Next returns a record in [0, N).
func (u Uniform) Next(r *rand.Rand) uint64 { return r.Uint64N(u.N) }

// Zipfian is YCSB's ZipfianGenerator over [0, n): item 0 most popular,
// item k's probability falling as 1/(k+1)^θ. Built once (zeta(n) is a sum
// over n terms), it is read-only after.
type Zipfian struct {
	n                        uint64
	theta, alpha, zetan, eta float64
	half                     float64
}

// Theta is YCSB's default zipfian constant.
const Theta = 0.99

// NewZipfian returns the generator over [0, n) with constant theta (0 <
// theta < 1).
func NewZipfian(n uint64, theta float64) *Zipfian {
	z := &Zipfian{n: n, theta: theta, alpha: 1 / (1 - theta)}
	for i := uint64(1); i <= n; i++ {
		z.zetan += 1 / math.Pow(float64(i), theta)
	}
	zeta2 := 1 + 1/math.Pow(2, theta)
	z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/z.zetan)
	z.half = 1 + math.Pow(0.5, theta)
	return z
}

// Rank returns an item in [0, n), 0 the most popular, not scrambled.
func (z *Zipfian) Rank(r *rand.Rand) uint64 {
	u := r.Float64()
	uz := u * z.zetan
	switch {
	case uz < 1:
		return 0
	case uz < z.half:
		return 1
	}
	return min(uint64(float64(z.n)*math.Pow(z.eta*u-z.eta+1, z.alpha)), z.n-1)
}

// Scrambled is YCSB's ScrambledZipfianGenerator: zipfian popularity,
// the popular records spread over the key space by Hash.
type Scrambled struct{ Z *Zipfian }

// Next returns a record in [0, n).
func (s Scrambled) Next(r *rand.Rand) uint64 { return Hash(s.Z.Rank(r)) % s.Z.n }

// Latest is YCSB's SkewedLatestGenerator: the most recently inserted
// records are the most popular, zipfian in their distance from the
// newest. Count is the number of records inserted so far (records [0,
// Count) exist); inserts advance it. The distance's zipfian is over the
// records there were when Latest was made, which inserts only add to, so
// every record chosen exists.
type Latest struct {
	Z     *Zipfian
	Count *atomic.Uint64
}

// Next returns one of the last n records inserted, the newest likeliest.
func (l Latest) Next(r *rand.Rand) uint64 {
	c := l.Count.Load()
	return c - 1 - min(l.Z.Rank(r), c-1)
}

// Op is an operation kind.
type Op uint8

// Operation kinds of the core workloads.
const (
	Read Op = iota
	Update
	Insert
	Scan
	ReadModifyWrite
)

// String names the operation as YCSB does.
func (o Op) String() string {
	return [...]string{"READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE"}[o]
}

// Distribution names a key chooser.
type Distribution string

// The key choosers of the core workloads.
const (
	DistZipfian Distribution = "zipfian"
	DistUniform Distribution = "uniform"
	DistLatest  Distribution = "latest"
)

// Workload is one core workload: an operation mix (the proportions sum
// to 1) and the chooser of the records its reads, updates and scans
// address. Scans cover a uniform 1 to MaxScanLen records from their start
// key; inserts add the next record.
type Workload struct {
	Name string
	// Read, Update, Insert, Scan and RMW are the proportions of each op.
	Read, Update, Insert, Scan, RMW float64
	// Dist is the request distribution.
	Dist Distribution
	// MaxScanLen is the longest scan (YCSB's maxscanlength, 100).
	MaxScanLen int
	// MinScanLen is the shortest scan (default 1); equal to MaxScanLen
	// it fixes every scan's length, as db_bench's seek-and-read does.
	MinScanLen int
}

// The core workloads, with YCSB's proportions and request distributions.
var (
	A = Workload{Name: "A", Read: 0.5, Update: 0.5, Dist: DistZipfian}
	B = Workload{Name: "B", Read: 0.95, Update: 0.05, Dist: DistZipfian}
	C = Workload{Name: "C", Read: 1, Dist: DistZipfian}
	D = Workload{Name: "D", Read: 0.95, Insert: 0.05, Dist: DistLatest}
	E = Workload{Name: "E", Scan: 0.95, Insert: 0.05, Dist: DistZipfian, MaxScanLen: 100}
	F = Workload{Name: "F", Read: 0.5, RMW: 0.5, Dist: DistZipfian}
)

// Core returns the core workloads A–F, in order.
func Core() []Workload { return []Workload{A, B, C, D, E, F} }

// Parse returns the named core workloads from a comma-separated list of
// letters ("A,C,E", case-insensitive; "all" is A–F), in the order given,
// each once.
func Parse(list string) ([]Workload, error) {
	if strings.EqualFold(strings.TrimSpace(list), "all") {
		return Core(), nil
	}
	var out []Workload
	var seen []string
	for _, f := range strings.Split(list, ",") {
		name := strings.ToUpper(strings.TrimSpace(f))
		i := slices.IndexFunc(Core(), func(w Workload) bool { return w.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("workload %q: want one of A, B, C, D, E, F or all", f)
		}
		if slices.Contains(seen, name) {
			return nil, fmt.Errorf("workload %s given twice", name)
		}
		seen = append(seen, name)
		out = append(out, Core()[i])
	}
	return out, nil
}

// Choose picks an operation by the workload's proportions.
func (w Workload) Choose(r *rand.Rand) Op {
	u := r.Float64()
	for _, c := range []struct {
		p  float64
		op Op
	}{{w.Read, Read}, {w.Update, Update}, {w.Insert, Insert}, {w.Scan, Scan}} {
		if u < c.p {
			return c.op
		}
		u -= c.p
	}
	if w.RMW > 0 {
		return ReadModifyWrite
	}
	// Rounding left u past the last proportion: the last op with any.
	switch {
	case w.Scan > 0:
		return Scan
	case w.Insert > 0:
		return Insert
	case w.Update > 0:
		return Update
	}
	return Read
}

// ScanLen picks a scan's length, uniform in [MinScanLen, MaxScanLen]
// (MinScanLen at least 1; MaxScanLen at least MinScanLen).
func (w Workload) ScanLen(r *rand.Rand) int {
	lo := max(w.MinScanLen, 1)
	return lo + r.IntN(max(w.MaxScanLen, lo)-lo+1)
}

// Split returns the n-1 keys that cut Key's key space into n ranges of
// equal share (n at least 1): Key(i) sorts by Hash(i), which is uniform
// over 64 bits, so each range [split j-1, split j) holds about 1/n of
// any set of records. A sharded store splits its key ranges there.
func Split(n int) [][]byte {
	var out [][]byte
	for j := 1; j < n; j++ {
		out = append(out, []byte(fmt.Sprintf("user%020d", uint64(j)*(math.MaxUint64/uint64(n)))))
	}
	return out
}
