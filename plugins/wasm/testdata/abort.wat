;; abort: says why with fail(), then traps — as the AssemblyScript SDK's
;; abort and the Rust SDK's panic hook do.
(module
  (import "switchyard" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "panicked at split.rs:12:5: index out of bounds")
  (func $split unreachable)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (call $fail (i32.const 16) (i32.const 46))
    (call $split)
    (i32.const 0)))
