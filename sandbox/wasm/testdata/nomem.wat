;; nomem.wat — does not export its memory: refused at load.
(module
  (memory 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i32.const 0)))
