;; initstate: reads its state in sy_init, where there is none.
(module
  (import "switchyard" "state_get" (func $state_get (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "k")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_init") (param i32) (result i32)
    (drop (call $state_get (i32.const 16) (i32.const 1) (i32.const 32) (i32.const 8)))
    (i32.const 0))
  (func (export "sy_handle") (param i32) (result i32) (i32.const 0)))
