;; recurse.wat — unbounded recursion: the engine's stack limit traps.
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func $f (param i32) (result i32)
    (call $f (i32.add (local.get 0) (i32.const 1))))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (call $f (i32.const 0))))
