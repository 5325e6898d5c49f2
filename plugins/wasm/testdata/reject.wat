;; reject: verdict reject with a reason.
(module
  (import "switchyard" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "order total is negative")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (call $fail (i32.const 16) (i32.const 23))
    (i32.const 2)))
