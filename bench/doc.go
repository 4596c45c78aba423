// Package bench holds the experiments that share their measuring code:
// bench btree (B-tree lookups on the host or pushed down), bench func
// (function runtimes and pushed-down chains) and bench fs (offloadfs
// against a plain file system). The other experiments have their own
// packages (blockio, lambdabench, offloadbench), and the machinery they
// share is in hist, proc, link, report and internal/harness.
package bench
