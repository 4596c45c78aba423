;; misc.wat — a pushdown step that neither finishes nor asks for a read, and
;; a compute that traps on unreachable.
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "pushdown") (param i32) (result i32)
    (i32.const 0))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    unreachable))
