;; rejectctl: verdict reject with a reason holding terminal controls: an
;; escape sequence (colour), a newline and a bell.
(module
  (import "switchyard" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "bad\1b[31mred\0anewline\07")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (call $fail (i32.const 16) (i32.const 20))
    (i32.const 2)))
