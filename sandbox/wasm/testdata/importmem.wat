;; importmem.wat — imports its memory, even from WASI: refused at load.
(module
  (import "wasi_snapshot_preview1" "memory" (memory 1))
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i32.const 0)))
