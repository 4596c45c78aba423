;; depth.wat — compute recurses as deep as the first 4 bytes of its
;; input say (little-endian) and returns 0 bytes of output; 0xFFFFFFFF is
;; a runaway recursion, which must fail with sandbox.ErrMemory once the
;; call stack passes Limits.StackBytes. The same module is
;; tests/security/testdata/depth.wasm.
(module
  (memory (export "memory") 1)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func $rec (param i32) (result i32)
    (if (result i32) (i32.eqz (local.get 0))
      (then (i32.const 0))
      (else (i32.add (call $rec (i32.sub (local.get 0) (i32.const 1))) (i32.const 1)))))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i32.sub (call $rec (i32.load (local.get 0))) (i32.load (local.get 0)))))
