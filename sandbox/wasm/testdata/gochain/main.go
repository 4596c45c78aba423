// Command gochain is chain.c written in Go with nsfunc, to test Go-built
// pushdown functions (ns_alloc'd context, scratch and data). Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o gochain.wasm .
//
// The tests build it themselves.
package main

import (
	"encoding/binary"

	"github.com/nearstore/nearstore/functions/go/nsfunc"
)

const fan = 1 << 63

func step(c *nsfunc.Ctx) int32 {
	le := binary.LittleEndian
	n := len(c.Data)
	if n == 0 || n%16 != 0 {
		return nsfunc.EINVAL
	}
	var next uint64
	for i := 0; i < n; i += 16 {
		v := le.Uint64(c.Data[i+8:])
		if v == 0xdeadbeef {
			return -1000
		}
		le.PutUint64(c.Scratch[8:], le.Uint64(c.Scratch[8:])+v)
		next = le.Uint64(c.Data[i:])
	}
	le.PutUint64(c.Scratch[0:], le.Uint64(c.Scratch[0:])+1)
	le.PutUint64(c.Scratch[16:], c.CurAddr)
	le.PutUint64(c.Scratch[24:], uint64(c.CurFile))
	le.PutUint64(c.Scratch[32:], uint64(n))
	switch {
	case next == 0:
		c.Done()
	case next&fan != 0:
		next &^= fan
		c.Next(1, next, 16)
		c.Next(1, next+16, 16)
	default:
		c.Next(c.CurFile, next, 16)
	}
	return 0
}

//go:wasmexport pushdown
func pushdown(ctx uint32) int32 { return nsfunc.Pushdown(ctx, step) }

func main() {}
