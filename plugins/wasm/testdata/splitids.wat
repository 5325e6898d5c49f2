;; splitids: two outputs to the type's routes, each with data and an id of its
;; own ("e1/0", "e1/1"), written by hand as plugin-abi.md lays them out.
(module
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; str destination "" | flags 12 (data, id) | str data | str id: 18 bytes
  (data (i32.const 0)  "\00\00\00\00\0c\01\00\00\00a\04\00\00\00e1/0")
  (data (i32.const 32) "\00\00\00\00\0c\01\00\00\00b\04\00\00\00e1/1")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $emit (i32.const 0) (i32.const 18)))
    (drop (call $emit (i32.const 32) (i32.const 18)))
    (i32.const 0)))
