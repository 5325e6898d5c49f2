;; typo: exports sy_handel, not sy_handle.
(module
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handel") (param i32) (result i32) (i32.const 0)))
