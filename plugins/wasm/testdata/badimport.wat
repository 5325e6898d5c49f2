;; badimport: imports from module "env" (AssemblyScript's abort without
;; --use abort=): refused at load.
(module
  (import "env" "abort" (func $abort (param i32 i32 i32 i32)))
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32) (i32.const 0)))
