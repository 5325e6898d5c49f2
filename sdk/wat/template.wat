;; template.wat — a starting point for a Switchyard plugin in WebAssembly text
;; (plugin ABI v1). It drops events of type "debug.noise" and sends all others,
;; unchanged, to "nats.local:events"; it reads its config but ignores it.
;; Envelope layouts: README.md beside this file.
;;
;; Build:  wat2wasm template.wat -o template.wasm
;; Check:  wasm-validate template.wasm && wasm-objdump -x template.wasm
(module
  ;; ---- host imports: module "switchyard" only (plus wasi_snapshot_preview1) --
  ;; input_read(ptr, len) -> size: copies the current input (the event during
  ;;   sy_handle, the config during sy_init) to ptr, at most len bytes; returns
  ;;   the input's full size.
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  ;; emit(ptr, len) -> rc: one output envelope; rc < 0: refused (malformed or
  ;;   over the plugin's limits).
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  ;; fail(ptr, len): the reason for a retry (1) or reject (2) verdict.
  (import "switchyard" "fail" (func $fail (param i32 i32)))
  ;; log(level, ptr, len): 0 trace, 1 debug, 2 info, 3 warn, 4 error.
  (import "switchyard" "log" (func $log (param i32 i32 i32)))

  ;; ---- memory ---------------------------------------------------------------
  ;; 0..1023     constants (below)
  ;; 1024..      the input (event or config), grown as needed
  (memory (export "memory") 1)
  (global $IN i32 (i32.const 1024))

  ;; An output envelope: str destination | u8 flags (0: inherit key, headers, data, id)
  (data (i32.const 0) "\11\00\00\00nats.local:events\00")   ;; 4 + 17 + 1 = 22 bytes
  (data (i32.const 32) "debug.noise")                        ;; 11 bytes
  (data (i32.const 64) "template: malformed event")          ;; 25 bytes
  (data (i32.const 96) "template: output refused")           ;; 24 bytes
  (data (i32.const 128) "template: out of memory")           ;; 23 bytes
  (data (i32.const 160) "template: loaded")                  ;; 16 bytes

  ;; ---- helpers --------------------------------------------------------------

  ;; Grows memory so that [0, end) is addressable; 0 on failure.
  (func $reserve (param $end i32) (result i32)
    (local $have i32)
    (local.set $have (i32.mul (memory.size) (i32.const 65536)))
    (if (i32.le_u (local.get $end) (local.get $have)) (then (return (i32.const 1))))
    (i32.ge_s
      (memory.grow
        (i32.sub (i32.shr_u (i32.add (local.get $end) (i32.const 65535)) (i32.const 16))
                 (memory.size)))
      (i32.const 0)))

  ;; Reads the whole input of length $len to $IN; 0 on failure.
  (func $read_input (param $len i32) (result i32)
    (if (i32.eqz (call $reserve (i32.add (global.get $IN) (local.get $len))))
      (then (return (i32.const 0))))
    (i32.eq (call $input_read (global.get $IN) (local.get $len)) (local.get $len)))

  ;; Given the address of a str (u32 LE length + bytes), the address after it.
  ;; (Wasm loads are little-endian and may be unaligned: i32.load reads a u32.)
  (func $skip_str (param $p i32) (result i32)
    (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))

  ;; Compares $n bytes at $a and $b.
  (func $bytes_eq (param $a i32) (param $b i32) (param $n i32) (result i32)
    (block $differ
      (loop $next
        (if (i32.eqz (local.get $n)) (then (return (i32.const 1))))
        (br_if $differ (i32.ne (i32.load8_u (local.get $a)) (i32.load8_u (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  ;; ---- exports --------------------------------------------------------------

  (func (export "sy_abi_version") (result i32) (i32.const 1))

  ;; Optional. The config envelope: u32 n × (str key, str value), sorted by key.
  ;; Return 0 to load; anything else (after $fail) refuses to load.
  (func (export "sy_init") (param $len i32) (result i32)
    (if (i32.eqz (call $read_input (local.get $len)))
      (then (call $fail (i32.const 128) (i32.const 23)) (return (i32.const 1))))
    ;; i32.load (global.get $IN) is the number of entries; walk them with $skip_str.
    (call $log (i32.const 2) (i32.const 160) (i32.const 16))
    (i32.const 0))

  ;; The event envelope: u8 version (1) | str id | str type | str source |
  ;; str subject | str key | u32 n × (str name, str value) | str data
  (func (export "sy_handle") (param $len i32) (result i32)
    (local $type i32)
    ;; A real plugin must check every length against $len before trusting it;
    ;; the router sends well-formed envelopes, but bounds checks are cheap.
    (if (i32.or (i32.eqz (call $read_input (local.get $len)))
                (i32.ne (i32.load8_u (global.get $IN)) (i32.const 1)))
      (then (call $fail (i32.const 64) (i32.const 25)) (return (i32.const 2))))
    ;; type is the str after id (which starts at IN + 1)
    (local.set $type (call $skip_str (i32.add (global.get $IN) (i32.const 1))))
    (if (i32.and
          (i32.eq (i32.load (local.get $type)) (i32.const 11))
          (call $bytes_eq (i32.add (local.get $type) (i32.const 4)) (i32.const 32) (i32.const 11)))
      (then (return (i32.const 0))))            ;; ok with no output: dropped
    (if (i32.lt_s (call $emit (i32.const 0) (i32.const 22)) (i32.const 0))
      (then (call $fail (i32.const 96) (i32.const 24)) (return (i32.const 1))))
    (i32.const 0))
)
