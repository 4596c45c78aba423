// Package bench is the benchmarks' root; it holds no code. Each
// experiment has its own package: blockio (bench blockio), btreebench
// (bench btree), fsbench (bench fs), funcbench (bench func), lambdabench
// (bench lambda, bench tpch), lsmbench (bench lsm) and offloadbench (bench
// offload, bench prep). ycsb is the YCSB workload model any of them may use.
// The machinery they share is in hist (latency histograms), proc (child
// processes), link (emulated links), report (machine description, bars,
// charts, tables) and internal/harness (in-process targets, CPU time,
// command counters).
package bench
