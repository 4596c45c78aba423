// Package volume provides the block backends that a nearstore target exports
// as NVMe namespaces: a sparse file, a raw block device, RAM, and a simulated
// SSD.
//
// Every backend implements [Volume]: a fixed-size, byte-addressed device that
// is safe for concurrent use. Byte addressing (rather than LBA addressing)
// keeps the target free to translate LBAs with whatever block size it
// advertises; [Volume.BlockSize] is the logical block size the target should
// report. Accesses that fall even partly outside [0, Size) fail as a whole
// with an error wrapping [ErrOutOfRange] and touch nothing, so a bad LBA never
// writes partial data past the end. Operations on a closed volume fail with
// [ErrClosed]. As on a real disk, concurrent overlapping writes may land in
// any order (and large ones may interleave), but a write never disturbs bytes
// outside its own range.
//
// # Specs
//
// [Open] takes a spec string; query parameters follow the first '?' and are
// separated by '&'. Unknown or repeated parameters are errors, as are any
// malformed parts, all wrapping [ErrBadSpec].
//
//	mem:SIZE[?bs=N]
//	    RAM (up to 1 PiB), allocated lazily in 1 MiB chunks on first
//	    write, so a large volume costs only what has been written. Reads
//	    of unwritten chunks return zeroes; WriteZeroes and Deallocate free
//	    whole chunks.
//
//	file:PATH[?size=SIZE][&direct=1][&bs=N]
//	    A sparse file. With size the file is created if absent and truncated
//	    or extended to SIZE; without it the file must exist and its size
//	    (rounded down to a multiple of bs) is used. direct=1 opens it with
//	    O_DIRECT (Linux only), bypassing the page cache.
//
//	dev:/dev/PATH[?bs=N][&direct=0]
//	    A raw block device, opened with O_DIRECT unless direct=0. Its size
//	    comes from the BLKGETSIZE64 ioctl and its default block size from the
//	    device's logical sector size (BLKSSZGET).
//
//	sim:nand:SIZE[?read_lat=D&write_lat=D&iops=R&bw=B&bs=N]
//	sim:optane:SIZE[?...]
//	    A simulated SSD: a mem volume plus a timing model, so experiments
//	    give the same numbers on any machine (see below).
//
// bs is the logical block size: a power of two from 512 to 64 KiB, 512 by
// default (4096 is the other common choice). SIZE must be a multiple of bs
// where it is given explicitly.
//
// # Sizes
//
// [ParseSize] reads a non-negative integer or decimal fraction with an
// optional unit, case-insensitively: none or B for bytes; K, Ki, KiB (and M,
// G, T, P, E likewise) for powers of 1024; KB, MB, GB, TB, PB, EB for powers
// of 1000, as disk vendors use them. "4k" is 4096 but "4KB" is 4000. The
// result must be a whole number of bytes ("1.5K" is fine, "0.1K" is not).
// [FormatSize] prints sizes with binary units.
//
// # Direct I/O
//
// O_DIRECT requires the file offset, the length and the buffer address to be
// aligned, normally to the device's logical sector size. For files this
// alignment is found by probing (a 512-byte direct read at offset 0; 4096 if
// that is refused); for devices it is the logical sector size. Aligned
// requests go straight to pread/pwrite. Anything else goes through an aligned
// bounce buffer, with read-modify-write of the partial blocks at either end
// of an unaligned write. Two writes to different bytes of the same block must
// not undo each other, so every write to a direct volume takes a set of
// striped locks (64 stripes over 64 KiB regions): shared for writes that
// replace whole blocks, exclusive for read-modify-write. Locks are taken in
// ascending stripe order, so they cannot deadlock. Reads take no lock; like a
// disk, a read racing a write may see either data.
//
// WriteZeroes uses fallocate(FALLOC_FL_ZERO_RANGE), falling back to
// FALLOC_FL_PUNCH_HOLE and then to writing zeroes; Deallocate punches a hole
// (FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE), falling back to zeroing. Either
// way, reads afterwards return zeroes. On direct volumes only the aligned
// middle of a range is passed to fallocate; partial blocks at the ends are
// zeroed by read-modify-write, which keeps the page cache out of the picture.
//
// # The simulated SSD
//
// A sim volume stores data in RAM like mem and delays each command according
// to [SimParams]. The device admits requests through two token buckets of
// depth one (strict pacing, so no burst ever exceeds the rated throughput):
// one for commands at IOPS per second and one for bytes at Bandwidth bytes
// per second. For a command of n bytes arriving at time t:
//
//	admit   = max(t, next command slot);      next command slot = admit + 1/IOPS
//	xferEnd = max(admit, next byte slot) + n/Bandwidth;  next byte slot = xferEnd
//	service = xferEnd - t
//	done    = t + max(latency, service)
//
// latency is ReadLatency for reads and WriteLatency for writes, WriteZeroes
// and Deallocate (which transfer no bytes). So an idle device answers in
// exactly the latency, many commands in flight overlap their latencies (the
// internal parallelism of a real SSD), and once a bucket is the bottleneck the
// completion rate is IOPS or Bandwidth/n and queueing delay grows as it would
// on a saturated device. A zero IOPS or Bandwidth means unlimited. Flush is a
// no-op: the simulated device has no volatile cache.
//
// Defaults ([NANDParams], [OptaneParams]) follow the BPF-oF testbed: NAND
// 90 µs reads, 20 µs writes (the write lands in the drive's DRAM cache),
// 700K IOPS, 3.2 GB/s; Optane 3 µs reads and writes (3D XPoint writes in
// place, so it is symmetric), 5M IOPS, 2.5 GB/s. [WithSimParams] replaces the
// defaults; query parameters (read_lat and write_lat as Go durations such as
// 90us, iops as a number with optional k/M/G suffix, bw as a size per second
// such as 3.2GB/s) override both.
//
// The data copy happens first and the command then waits out the rest of its
// modelled time, so copy cost is included rather than added. Waiting must be
// accurate at microsecond scale without costing CPU, which a real SSD's
// queue does not: time.Sleep is late by up to a millisecond when the process
// is idle (the runtime's poller sleeps in whole milliseconds), and spinning
// on the clock burns a core per outstanding command. So a waiting command
// parks, and one goroutine per volume wakes the commands whose times have
// come when a timerfd in the runtime's poller fires for the earliest of
// them (simwait.go): idle, a command completes within a few microseconds of
// its time; busy, as late as the poller's turn, like network I/O. Platforms
// without timerfd sleep until 200 µs before the deadline and spin the tail
// with runtime.Gosched. BenchmarkSimNAND reports the latency and the CPU per
// read of both ways. The model cannot go faster than the host can copy
// memory.
package volume
