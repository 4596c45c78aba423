;; startloop.wat — a start function that never returns: Load must give up.
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func $spin (loop $l (br $l)))
  (start $spin)
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i32.const 0)))
