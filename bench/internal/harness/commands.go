package harness

import "github.com/prometheus/client_golang/prometheus"

// CommandCounter reads the target's command counters for one namespace.
type CommandCounter struct {
	Reg  *prometheus.Registry
	NSID string
}

// Read returns the counts by operation.
func (c CommandCounter) Read() (map[string]uint64, error) {
	mfs, err := c.Reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "nearstore_target_commands_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var nsid, op string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "nsid":
					nsid = l.GetValue()
				case "op":
					op = l.GetValue()
				}
			}
			if nsid == c.NSID {
				out[op] += uint64(m.GetCounter().GetValue())
			}
		}
	}
	return out, nil
}

// DiffCounts returns the counts that grew from before to after, by how much.
func DiffCounts(after, before map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range after {
		if v > before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// SumCounts returns the total of m's counts.
func SumCounts(m map[string]uint64) uint64 {
	var s uint64
	for _, v := range m {
		s += v
	}
	return s
}
