;; noheap.wat — exports neither __heap_base nor ns_alloc, so the runtime
;; cannot place buffers: refused at load.
(module
  (memory (export "memory") 2)
  (func (export "compute") (param i32 i32 i32 i32) (result i32)
    (i32.const 0)))
