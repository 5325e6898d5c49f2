;; bigkey: writes a state key of 300 bytes, over the 256-byte limit.
(module
  (import "switchyard" "state_put" (func $state_put (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $state_put (i32.const 1024) (i32.const 300) (i32.const 0) (i32.const 1) (i32.const 0)))
    (i32.const 0)))
