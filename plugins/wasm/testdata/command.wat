;; command: a WASI command (exports _start), not a reactor: refused at load
;; with a hint.
(module
  (memory (export "memory") 1)
  (func (export "_start")))
