;; tablegrow: declares a table of 16 elements without a maximum, and on
;; every event grows it by 2^27 elements (1 GiB in wazero) and fills it.
;; The router gives the table its minimum as maximum, so the grow fails
;; (-1) and the event passes through; a grow that succeeded traps.
(module
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table $t 16 funcref)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (if (i32.ne (table.grow $t (ref.null func) (i32.const 134217728)) (i32.const -1))
      (then unreachable))
    (table.fill $t (i32.const 0) (ref.null func) (table.size $t))
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (i32.const 0)))
