// Package functions holds nearstore's standard functions: the wasm modules
// and eBPF objects built from functions/src (by scripts/build-functions.sh,
// committed and embedded here), and native Go implementations with the
// same semantics, which tests and `nearstore bench func` compare the
// runtimes against. functions/README.md documents every input, output,
// scratch and on-disk format byte by byte.
//
// The functions:
//
//   - btree_lookup (pushdown): a point lookup or a range scan of BPF-KV's
//     B+-tree (BuildBTree, BTreeStep);
//   - stats64, stats32 (compute): count, sum, min and max of u64s or u32s;
//   - knn (compute): squared L2 distances of integer vectors to a target;
//   - grep (compute): the rows of a text that contain a pattern;
//   - bitmap (compute): expands a run-length-encoded bitmap;
//   - tpch_q1, tpch_q6, tpch_q12, tpch_q14 (compute): the filter and
//     projection (and for Q1 and Q6 the partial aggregation) of TPC-H
//     queries over package tpch's LINEITEM rows, finished by tpch.Finish.
package functions

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/nearstore/nearstore/sandbox"
)

//go:embed wasm/*.wasm ebpf/*.o
var modules embed.FS

// Error codes the functions return (nearstore.h). The native
// implementations return them as *sandbox.FunctionError, as the runtimes do.
const (
	EINVAL = -22 // malformed input
	ERANGE = -34 // output does not fit
	ENOENT = -2  // key not found
)

func fnErr(code int32) error { return &sandbox.FunctionError{Code: code} }

// Module returns the built module of the named function for a runtime.
func Module(name string, kind sandbox.Kind) ([]byte, error) {
	var path string
	switch kind {
	case sandbox.KindWasm:
		path = "wasm/" + name + ".wasm"
	case sandbox.KindEBPF:
		path = "ebpf/" + name + ".o"
	default:
		return nil, fmt.Errorf("functions: no modules of kind %v", kind)
	}
	if name == "" || strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("functions: bad function name %q", name)
	}
	b, err := modules.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("functions: no %v module for %q", kind, name)
	}
	return b, nil
}

// Names returns the names of the standard functions, sorted.
func Names() []string {
	var names []string
	for _, dir := range []string{"wasm", "ebpf"} {
		ents, _ := fs.ReadDir(modules, dir)
		for _, e := range ents {
			n := e.Name()
			n = strings.TrimSuffix(strings.TrimSuffix(n, ".wasm"), ".o")
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names
}

// Kinds returns the kinds the named function is built for.
func Kinds(name string) []sandbox.Kind {
	var ks []sandbox.Kind
	for _, k := range []sandbox.Kind{sandbox.KindWasm, sandbox.KindEBPF} {
		if _, err := Module(name, k); err == nil {
			ks = append(ks, k)
		}
	}
	return ks
}
