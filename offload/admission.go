package offload

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Policy is an engine's admission policy (OffloadFS's two).
type Policy string

const (
	// PolicyNone admits every task.
	PolicyNone Policy = "none"
	// PolicyCPU admits a task only while the machine's CPU use is at or
	// under the threshold; a rejected task runs on its client at once.
	PolicyCPU Policy = "cpu"
	// PolicyTokens admits a task only from a client holding one of the
	// engine's tokens; tokens expire, so a client that dies holding one
	// gives it back by itself.
	PolicyTokens Policy = "tokens"
)

// ParsePolicy parses a policy's name.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyNone, PolicyCPU, PolicyTokens:
		return p, nil
	}
	return "", fmt.Errorf("offload: unknown admission policy %q (none, cpu, tokens)", s)
}

// Admission configures an engine's admission control.
type Admission struct {
	Policy Policy
	// CPUThreshold is the machine CPU use, 0 to 1, above which
	// PolicyCPU turns tasks away.
	CPUThreshold float64
	// Tokens is how many tokens PolicyTokens circulates, and TokenTTL
	// how long one stays with a client that does not give it back.
	Tokens   int
	TokenTTL time.Duration
}

// admission is the policy's pure core: observations in (CPU samples,
// requests, the time), decisions out. It does no I/O.
type admission struct {
	cfg Admission

	mu     sync.Mutex
	cpu    float64
	tokens map[uint64]heldToken
	next   uint64
	seen   map[string]time.Time // clients that asked, last time
	served map[string]uint64    // tasks each client had run here
}

type heldToken struct {
	client  string
	expires time.Time
}

func newAdmission(cfg Admission) (*admission, error) {
	switch cfg.Policy {
	case "":
		cfg.Policy = PolicyNone
	case PolicyNone:
	case PolicyCPU:
		if cfg.CPUThreshold <= 0 || cfg.CPUThreshold > 1 {
			return nil, fmt.Errorf("offload: CPU threshold %v outside (0, 1]", cfg.CPUThreshold)
		}
	case PolicyTokens:
		if cfg.Tokens <= 0 {
			return nil, fmt.Errorf("offload: %d tokens: at least 1 is needed", cfg.Tokens)
		}
		if cfg.TokenTTL <= 0 {
			cfg.TokenTTL = 10 * time.Second
		}
	default:
		return nil, fmt.Errorf("offload: unknown admission policy %q", cfg.Policy)
	}
	return &admission{cfg: cfg, tokens: map[uint64]heldToken{}, seen: map[string]time.Time{}, served: map[string]uint64{}}, nil
}

// observeCPU records the machine's CPU use, 0 to 1.
func (a *admission) observeCPU(v float64) {
	a.mu.Lock()
	a.cpu = v
	a.mu.Unlock()
}

// admit decides whether client's task (under token) may start now.
func (a *admission) admit(client string, token uint64, now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.cfg.Policy {
	case PolicyCPU:
		if a.cpu > a.cfg.CPUThreshold {
			return fmt.Errorf("%w: CPU use %.0f%% above the threshold %.0f%%", ErrRejected, 100*a.cpu, 100*a.cfg.CPUThreshold)
		}
	case PolicyTokens:
		a.expireLocked(now)
		t, ok := a.tokens[token]
		if !ok || t.client != client {
			return fmt.Errorf("%w: client %q holds no token %d", ErrRejected, client, token)
		}
	}
	return nil
}

// ran records that client's task ran here.
func (a *admission) ran(client string) {
	a.mu.Lock()
	a.served[client]++
	a.mu.Unlock()
}

// acquire gives client a token if one is free and the client holds less
// than its fair share: the tokens divided among the clients that asked
// within a TTL.
func (a *admission) acquire(client string, now time.Time) (uint64, time.Time, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg.Policy != PolicyTokens {
		return 0, time.Time{}, fmt.Errorf("offload: the engine's policy is %s, not tokens", a.cfg.Policy)
	}
	a.expireLocked(now)
	a.seen[client] = now
	active, held := 0, 0
	for c, t := range a.seen {
		if now.Sub(t) > a.cfg.TokenTTL {
			delete(a.seen, c)
			continue
		}
		active++
	}
	for _, t := range a.tokens {
		if t.client == client {
			held++
		}
	}
	share := (a.cfg.Tokens + active - 1) / active
	if len(a.tokens) >= a.cfg.Tokens || held >= share {
		return 0, time.Time{}, fmt.Errorf("%w: no token free for %q (%d of %d held, %d by it)", ErrRejected, client, len(a.tokens), a.cfg.Tokens, held)
	}
	a.next++
	exp := now.Add(a.cfg.TokenTTL)
	a.tokens[a.next] = heldToken{client: client, expires: exp}
	return a.next, exp, nil
}

// release takes a token back.
func (a *admission) release(id uint64) {
	a.mu.Lock()
	delete(a.tokens, id)
	a.mu.Unlock()
}

func (a *admission) expireLocked(now time.Time) {
	for id, t := range a.tokens {
		if !now.Before(t.expires) {
			delete(a.tokens, id)
		}
	}
}

// free returns how many tokens are free now.
func (a *admission) free(now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg.Policy != PolicyTokens {
		return 0
	}
	a.expireLocked(now)
	return a.cfg.Tokens - len(a.tokens)
}

// fairness returns Jain's index over the tasks each client had run here.
func (a *admission) fairness() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	xs := make([]float64, 0, len(a.served))
	for _, n := range a.served {
		xs = append(xs, float64(n))
	}
	return Jain(xs)
}

// Jain returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when all
// are equal, 1/n when one has everything; 1 for no values or all zero.
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// procStat samples the machine's CPU use from /proc/stat: the busy share
// of all CPU time since the previous sample.
type procStat struct{ busy, total uint64 }

// sample returns the use since the previous call (0 on the first, or
// where /proc/stat cannot be read).
func (p *procStat) sample() float64 {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0
	}
	var busy, total uint64
	for i, s := range fields[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	db, dt := busy-p.busy, total-p.total
	first := p.total == 0
	p.busy, p.total = busy, total
	if first || dt == 0 {
		return 0
	}
	return float64(db) / float64(dt)
}

// ProcessCPU returns a sampler of this process's CPU use as a share of
// the machine (all CPUs) since the previous sample: for an engine whose
// "storage node" shares its machine with other work (a benchmark's
// clients), where the machine's use would count theirs too.
func ProcessCPU() func() float64 {
	var last time.Duration
	var at time.Time
	return func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		now := time.Now()
		defer func() { last, at = cpu, now }()
		if at.IsZero() {
			return 0
		}
		wall := now.Sub(at) * time.Duration(runtime.NumCPU())
		if wall <= 0 {
			return 0
		}
		return min(1, float64(cpu-last)/float64(wall))
	}
}
