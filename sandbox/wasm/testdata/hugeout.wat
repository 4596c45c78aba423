;; hugeout.wat — claims more output than it was given (sandbox.ErrOutput) and
;; asks a pushdown step for 16 reads of 8 KiB (128 KiB > MaxStepBytes).
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "pushdown") (param $ctx i32) (result i32)
    (local $i i32)
    (loop $fill
      ;; size[i] at ctx+136+8i
      (i64.store offset=136
        (i32.add (local.get $ctx) (i32.shl (local.get $i) (i32.const 3)))
        (i64.const 8192))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $fill (i32.lt_u (local.get $i) (i32.const 16))))
    (i32.const 0))
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i32.const 0x7fffffff)))
