;; tablebomb: declares three tables of 2^27 elements (1 GiB each in
;; wazero) and fills them on every event: more than limits.memory, so the
;; router does not load it.
(module
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table $a 134217728 funcref)
  (table $b 134217728 funcref)
  (table $c 134217728 134217728 funcref)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (table.fill $a (i32.const 0) (ref.null func) (table.size $a))
    (table.fill $b (i32.const 0) (ref.null func) (table.size $b))
    (table.fill $c (i32.const 0) (ref.null func) (table.size $c))
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (i32.const 0)))
