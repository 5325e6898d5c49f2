;; initfail: sy_init refuses its configuration.
(module
  (import "switchyard" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "config key \22region\22 is required")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_init") (param i32) (result i32)
    (call $fail (i32.const 16) (i32.const 31))
    (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32) (i32.const 0)))
