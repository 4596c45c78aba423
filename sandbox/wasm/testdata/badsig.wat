;; badsig.wat — compute with the wrong signature: refused at load.
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "compute") (param i32) (result i32)
    (i32.const 0)))
