;; noentry.wat — neither pushdown nor compute: refused at load.
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "other") (param i32) (result i32) (local.get 0)))
