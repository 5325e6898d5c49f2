;; malformed: emits an envelope with unknown flag bits, and one that ends
;; early; returns ok regardless.
(module
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\00\00\00\00\ff")
  (data (i32.const 16) "\05\00\00\00ab")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (drop (call $emit (i32.const 16) (i32.const 6)))
    (i32.const 0)))
