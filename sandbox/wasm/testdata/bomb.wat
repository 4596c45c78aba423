;; bomb.wat — grows memory one page at a time until memory.grow fails, then
;; writes the final size in pages (u64) to out. The runtime's cap must hold.
(module
  (memory (export "memory") 2)
  (global (export "__heap_base") i32 (i32.const 1024))
  (func (export "compute") (param $in i32) (param $inlen i32) (param $out i32) (param $cap i32) (result i32)
    (block $done
      (loop $grow
        (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
        (br $grow)))
    (i64.store (local.get $out) (i64.extend_i32_u (memory.size)))
    (i32.const 8)))
