;; gocommand: what Go builds without -buildmode=c-shared: the ABI's exports
;; beside _start, no _initialize (calling them traps: runtime not initialized).
(module
  (memory (export "memory") 1)
  (func (export "_start"))
  (func (export "sy_abi_version") (result i32) (unreachable))
  (func (export "sy_handle") (param i32) (result i32) (i32.const 0)))
