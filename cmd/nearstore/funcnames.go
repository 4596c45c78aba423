package main

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/sandbox"
)

// The standard functions (package functions) have names the CLI knows
// without asking the target, which stores none: a module's ID is the hash
// of its bytes, so the ID of each committed module names it.

// standardNames maps the IDs of the committed standard modules, wasm and
// eBPF, to their names.
func standardNames() map[sandbox.ID]string {
	m := map[sandbox.ID]string{}
	for _, name := range functions.Names() {
		for _, kind := range []sandbox.Kind{sandbox.KindWasm, sandbox.KindEBPF} {
			if b, err := functions.Module(name, kind); err == nil {
				m[sandbox.IDOf(b)] = name
			}
		}
	}
	return m
}

// parseKind reads the value s of the runtime flag flag (--runtime,
// --kind): wasm or ebpf.
func parseKind(flag, s string) (sandbox.Kind, error) {
	switch s {
	case "wasm":
		return sandbox.KindWasm, nil
	case "ebpf":
		return sandbox.KindEBPF, nil
	}
	return 0, fmt.Errorf("%s %q: want wasm or ebpf", flag, s)
}

// standardModule returns the committed module of a standard function.
func standardModule(name, kind string) ([]byte, error) {
	k, err := parseKind("--kind", kind)
	if err != nil {
		return nil, &usageError{err}
	}
	return functions.Module(name, k)
}

// decodeOutput renders a standard function's λ read output for people:
// "" if the function is not one whose output has a known shape.
func decodeOutput(name string, out []byte) string {
	switch name {
	case "stats64", "stats32":
		s, err := functions.ParseStats(out)
		if err != nil {
			return ""
		}
		return fmt.Sprintf("count %d\nsum %d\nmin %d\nmax %d\n", s.Count, s.Sum, s.Min, s.Max)
	case "knn":
		if len(out)%8 != 0 {
			return ""
		}
		var sb strings.Builder
		for i := 0; i < len(out); i += 8 {
			fmt.Fprintf(&sb, "%d\n", binary.LittleEndian.Uint64(out[i:]))
		}
		return sb.String()
	case "grep":
		return string(out)
	}
	return ""
}
