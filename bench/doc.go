// Package bench holds the experiments that share their measuring code:
// bench btree (B-tree lookups on the host or pushed down) and bench func
// (function runtimes and pushed-down chains). The other experiments have
// their own packages (blockio, fsbench, lambdabench, offloadbench), and
// the machinery they share is in hist, proc, link, report and
// internal/harness.
package bench
