;; transformer: one output that changes everything: destination
;; "kafka.main:enriched", key "k2", headers {region: eu-1} (replacing the
;; input's), data {"enriched":true}. It logs at info.
(module
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (import "switchyard" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0)
    "\13\00\00\00kafka.main:enriched"                  ;; destination
    "\07"                                              ;; flags: key, headers, data
    "\02\00\00\00k2"                                   ;; key
    "\01\00\00\00" "\06\00\00\00region" "\04\00\00\00eu-1" ;; 1 header
    "\11\00\00\00{\22enriched\22:true}")               ;; data (73 bytes in all)
  (data (i32.const 100) "transforming")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param $len i32) (result i32)
    (drop (call $input_read (i32.const 1024) (i32.const 1024)))
    (call $log (i32.const 2) (i32.const 100) (i32.const 12))
    (if (i32.lt_s (call $emit (i32.const 0) (i32.const 73)) (i32.const 0))
      (then (return (i32.const 1))))
    (i32.const 0)))
