// Package bench holds the B-tree experiment (bench btree: lookups on the
// host or pushed down). The other experiments have their own packages
// (blockio, fsbench, funcbench, lambdabench, offloadbench), and the
// machinery they share is in hist, proc, link, report and
// internal/harness.
package bench
