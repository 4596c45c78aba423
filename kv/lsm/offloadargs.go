package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/nearstore/nearstore/pushdown"
)

// CompactTaskName is the offload task (package kv/lsm/offloadtask
// registers it into an engine) that runs a CompactionTask at the storage
// node: its request's files are the input tables, in CompactArgs.Inputs'
// order, then the preallocated outputs, in CompactArgs.Outputs' order.
const CompactTaskName = "lsm.compact"

// CompactArgs are an offloaded compaction's arguments: a CompactionTask
// with the file numbers of its inputs and of the outputs the host made
// for it. Encoding (docs/LSM.md, "Offloaded compaction"), little-endian:
//
//	+0   magic            uint32 = 0x63736c6e ("nlsc")
//	+4   version          uint8  = 1
//	+5   output level     uint8  (1 to 6)
//	+6   flags            uint8  (bit 0: drop deletes; others zero)
//	+7   reserved         uint8  = 0
//	+8   target size      uint64 (an output is cut at it; 0: one output)
//	+16  block size       uint32
//	+20  restart interval uint32
//	+24  bloom bits/key   int32
//	+28  inputs           uint16 (n, >= 1)
//	+30  outputs          uint16 (m, >= 1; n + m <= 16)
//	+32  snapshots        uint32 (s)
//	+36  n inputs, 17 bytes each: level uint8, file number uint64, size uint64
//	     m outputs, 8 bytes each: file number uint64
//	     s snapshots, 8 bytes each: seq uint64, ascending
//
// The encoding is exactly that long. Input levels do not decrease and
// are at most the output level (the bottom level compacts into itself);
// file numbers are distinct.
type CompactArgs struct {
	Task    CompactionTask
	Outputs []uint64
}

const (
	compactArgsMagic   = 0x63736c6e
	compactArgsVersion = 1
	compactArgsHeader  = 36
	compactArgsInput   = 17
)

// errBadArgs is wrapped by DecodeCompactArgs' errors.
var errBadArgs = errors.New("lsm: malformed compaction arguments")

// Encode appends a's encoding to dst.
func (a *CompactArgs) Encode(dst []byte) []byte {
	t := &a.Task
	le := binary.LittleEndian
	var flags uint8
	if t.DropDeletes {
		flags |= 1
	}
	n := 0
	for _, in := range t.Inputs {
		n += len(in.Files)
	}
	dst = le.AppendUint32(dst, compactArgsMagic)
	dst = append(dst, compactArgsVersion, uint8(t.OutputLevel), flags, 0)
	dst = le.AppendUint64(dst, t.TargetFileSize)
	dst = le.AppendUint32(dst, uint32(t.Table.BlockSize))
	dst = le.AppendUint32(dst, uint32(t.Table.BlockRestartInterval))
	dst = le.AppendUint32(dst, uint32(int32(t.Table.BloomBitsPerKey)))
	dst = le.AppendUint16(dst, uint16(n))
	dst = le.AppendUint16(dst, uint16(len(a.Outputs)))
	dst = le.AppendUint32(dst, uint32(len(t.Snapshots)))
	for _, in := range t.Inputs {
		for _, f := range in.Files {
			dst = append(dst, uint8(in.Level))
			dst = le.AppendUint64(dst, f.FileNum)
			dst = le.AppendUint64(dst, f.Size)
		}
	}
	for _, o := range a.Outputs {
		dst = le.AppendUint64(dst, o)
	}
	for _, s := range t.Snapshots {
		dst = le.AppendUint64(dst, s)
	}
	return dst
}

// DecodeCompactArgs decodes and checks an encoding: the bytes come from
// another machine.
func DecodeCompactArgs(b []byte) (*CompactArgs, error) {
	le := binary.LittleEndian
	if len(b) < compactArgsHeader {
		return nil, fmt.Errorf("%w: %d bytes, the header is %d", errBadArgs, len(b), compactArgsHeader)
	}
	if m := le.Uint32(b); m != compactArgsMagic {
		return nil, fmt.Errorf("%w: magic %#x", errBadArgs, m)
	}
	if b[4] != compactArgsVersion {
		return nil, fmt.Errorf("%w: version %d", errBadArgs, b[4])
	}
	out, flags := int(b[5]), b[6]
	if out < 1 || out >= NumLevels || flags&^1 != 0 || b[7] != 0 {
		return nil, fmt.Errorf("%w: output level %d, flags %#x, reserved %d", errBadArgs, out, flags, b[7])
	}
	a := &CompactArgs{Task: CompactionTask{
		OutputLevel:    out,
		DropDeletes:    flags&1 != 0,
		TargetFileSize: le.Uint64(b[8:]),
		Table: TableOptions{
			BlockSize:            int(le.Uint32(b[16:])),
			BlockRestartInterval: int(le.Uint32(b[20:])),
			BloomBitsPerKey:      int(int32(le.Uint32(b[24:]))),
		},
	}}
	if bs, ri := a.Task.Table.BlockSize, a.Task.Table.BlockRestartInterval; bs < 0 || bs > 1<<30 || ri < 0 || ri > 1<<20 {
		return nil, fmt.Errorf("%w: block size %d, restart interval %d", errBadArgs, bs, ri)
	}
	n, m, s := int(le.Uint16(b[28:])), int(le.Uint16(b[30:])), uint64(le.Uint32(b[32:]))
	if n < 1 || m < 1 || n+m > pushdown.MaxFiles {
		return nil, fmt.Errorf("%w: %d inputs and %d outputs (1 or more each, at most %d files)", errBadArgs, n, m, pushdown.MaxFiles)
	}
	want := uint64(compactArgsHeader) + uint64(n)*compactArgsInput + uint64(m)*8 + s*8
	if uint64(len(b)) != want {
		return nil, fmt.Errorf("%w: %d bytes, want %d", errBadArgs, len(b), want)
	}
	p := b[compactArgsHeader:]
	seen := map[uint64]bool{}
	fresh := func(num uint64) error {
		if seen[num] {
			return fmt.Errorf("%w: file %06d named twice", errBadArgs, num)
		}
		seen[num] = true
		return nil
	}
	for range n {
		level, num, size := int(p[0]), le.Uint64(p[1:]), le.Uint64(p[9:])
		p = p[compactArgsInput:]
		if err := fresh(num); err != nil {
			return nil, err
		}
		ins := a.Task.Inputs
		switch last := len(ins) - 1; {
		case level > out:
			return nil, fmt.Errorf("%w: input level %d below output level %d", errBadArgs, level, out)
		case last >= 0 && level < ins[last].Level:
			return nil, fmt.Errorf("%w: input levels out of order", errBadArgs)
		case last < 0 || level > ins[last].Level:
			a.Task.Inputs = append(ins, CompactionInput{Level: level})
		}
		in := &a.Task.Inputs[len(a.Task.Inputs)-1]
		in.Files = append(in.Files, &FileMeta{FileNum: num, Size: size})
	}
	for range m {
		num := le.Uint64(p)
		p = p[8:]
		if err := fresh(num); err != nil {
			return nil, err
		}
		a.Outputs = append(a.Outputs, num)
	}
	for range s {
		a.Task.Snapshots = append(a.Task.Snapshots, le.Uint64(p))
		p = p[8:]
	}
	if !slices.IsSorted(a.Task.Snapshots) {
		return nil, fmt.Errorf("%w: snapshots not ascending", errBadArgs)
	}
	return a, nil
}

// NumInputs returns the number of input tables.
func (a *CompactArgs) NumInputs() int {
	n := 0
	for _, in := range a.Task.Inputs {
		n += len(in.Files)
	}
	return n
}
