// Package offload is the offload engine (DESIGN.md, "Offload"): a gRPC
// service that runs whole I/O-heavy tasks — Go code compiled into the
// binary and registered by name — on the storage node (in the target's
// process, reading the volume directly) or on a peer that reaches the
// volume over NVMe/TCP, on blocks the file system's owner granted; its
// client, which runs on this host whatever an engine turns away; the
// admission policies (a CPU threshold, circulating tokens); and the
// offload cache.
//
// The rules it keeps:
//
//   - A task touches the volume only through its Env (offload_read,
//     offload_write), which refuses every byte outside the files of its
//     request: past a file's size, or a write to a file granted read. A
//     request's extents must lie inside the device. Beneath that, the
//     target refuses an engine anything outside its grants: a peer's
//     commands as a task host, the in-target engine's direct I/O through
//     Config.Admit (target.Server.AdmitGranted).
//   - When a task's run ends — returned, failed, timed out, or its client
//     gone — its Env is closed before the engine answers: I/O under way
//     finishes, later I/O fails. So once the client has its answer (or
//     its error), the task writes nothing more, and the owner may release
//     the grants and commit or free the outputs. A task that ignores its
//     context and never returns keeps a goroutine, and nothing else.
//   - The cache serves a block only to a request naming the file's inode
//     with the extent-map version and contents tag it was read under
//     (Cache), and only for files granted read; outputs are never cached.
//   - Admission is decided before a task touches anything: a task an
//     engine turns away (codes.ResourceExhausted) has done nothing, and
//     its client runs it itself.
package offload
