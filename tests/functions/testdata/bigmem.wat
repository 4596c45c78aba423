;; bigmem.wat — declares 32 MiB of initial memory, over the 16 MiB limit:
;; refused at Function Load.
(module
  (memory (export "memory") 512)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i32.const 0)))
