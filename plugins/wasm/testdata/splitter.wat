;; splitter: three outputs, each with its own key ("a", "b", "c") and data
;; ("1", "2", "3"); destination and headers inherit the input's.
(module
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; str destination "" | flags 5 (key, data) | str key | str data: 15 bytes
  (data (i32.const 0)  "\00\00\00\00\05\01\00\00\00a\01\00\00\001")
  (data (i32.const 16) "\00\00\00\00\05\01\00\00\00b\01\00\00\002")
  (data (i32.const 32) "\00\00\00\00\05\01\00\00\00c\01\00\00\003")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $emit (i32.const 0) (i32.const 15)))
    (drop (call $emit (i32.const 16) (i32.const 15)))
    (drop (call $emit (i32.const 32) (i32.const 15)))
    (i32.const 0)))
