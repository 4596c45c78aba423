;; import.wat — imports a host function from "env": refused at Function Load.
(module
  (import "env" "now" (func $now (result i64)))
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i32.wrap_i64 (call $now))))
