;; toolarge: one output with 2 MiB of data (limits.max_output_bytes
;; defaults to 1 MiB); returns ok regardless.
(module
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 33)
  ;; str destination "" | flags 4 (data) | u32 data length 0x200000 | zeros
  (data (i32.const 0) "\00\00\00\00\04\00\00\20\00")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $emit (i32.const 0) (i32.const 2097161)))
    (i32.const 0)))
