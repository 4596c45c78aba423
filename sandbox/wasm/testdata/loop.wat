;; loop.wat — both entry points spin forever: the call must end with
;; sandbox.ErrTimeout after Limits.Time.
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "pushdown") (param i32) (result i32)
    (loop $l (br $l))
    (i32.const 0))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (loop $l (br $l))
    (i32.const 0)))
