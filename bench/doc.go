// Package bench generates workloads, runs them against nearstore and the
// systems it is compared with, and reports what it measured.
package bench
