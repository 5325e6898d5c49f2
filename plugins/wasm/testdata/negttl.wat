;; negttl: writes a state key with a time to live of -5 seconds.
(module
  (import "switchyard" "state_put" (func $state_put (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "k")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $state_put (i32.const 16) (i32.const 1) (i32.const 16) (i32.const 1) (i32.const -5)))
    (i32.const 0)))
