;; abi2: speaks ABI version 2, which this router does not.
(module
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 2))
  (func (export "sy_handle") (param i32) (result i32) (i32.const 0)))
