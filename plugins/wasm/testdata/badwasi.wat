;; badwasi: imports a function wasi_snapshot_preview1 does not have, and
;; switchyard.emit with the wrong signature; exports sy_handle with the
;; wrong signature. All refused at load, in one error.
(module
  (import "wasi_snapshot_preview1" "sock_open" (func (param i32 i32 i32) (result i32)))
  (import "switchyard" "emit" (func (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (result i32) (i32.const 0)))
