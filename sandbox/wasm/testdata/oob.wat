;; oob.wat — stores past the end of linear memory: sandbox.ErrMemory.
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "pushdown") (param i32) (result i32)
    (i64.store (i32.const 0xfffffff0) (i64.const 1))
    (i32.const 0))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i64.store (i32.const 0xfffffff0) (i64.const 1))
    (i32.const 0)))
