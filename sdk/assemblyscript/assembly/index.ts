// AssemblyScript guest SDK for Switchyard plugins (plugin ABI v1).
//
// A plugin's entry file registers its callbacks at top level and re-exports
// the ABI functions:
//
//   import { Event, Verdict, forward, onEvent, retry } from "@switchyard-router/sdk-assemblyscript/assembly";
//   export { sy_abi_version, sy_init, sy_handle } from "@switchyard-router/sdk-assemblyscript/assembly";
//
//   onEvent((ev: Event): Verdict => {
//     if (ev.type == "debug.noise") return Verdict.Ok;         // dropped
//     if (forward() < 0) return retry("output refused");
//     return Verdict.Ok;
//   });
//
// Build (see the README for why each flag):
//   npx asc assembly/index.ts -o plugin.wasm -O3 --runtime incremental --noAssert \
//     --use abort=~lib/@switchyard-router/sdk-assemblyscript/assembly/index/abort
//
// Memory with --runtime stub (a bump allocator that never frees), an opt-in
// for speed: everything allocated while an event is handled (the Event, its
// strings, outputs) is released in one go when sy_handle returns.
// Allocations made at top level and in the init callback are kept. So a
// stub plugin must never keep a reference to an object created during an
// event in a global; numbers/booleans, or objects created in init, only.
// The incremental runtime (the template's) and minimal (the SDK collects
// garbage after every event) have no such condition.

// ASC_RUNTIME values (the compiler's --runtime).
const RUNTIME_STUB = 0;
const RUNTIME_MINIMAL = 1;

// ---- host imports ---------------------------------------------------------

// @ts-ignore: decorator
@external("switchyard", "input_read")
declare function host_input_read(ptr: usize, len: u32): i32;
// @ts-ignore: decorator
@external("switchyard", "emit")
declare function host_emit(ptr: usize, len: u32): i32;
// @ts-ignore: decorator
@external("switchyard", "fail")
declare function host_fail(ptr: usize, len: u32): void;
// @ts-ignore: decorator
@external("switchyard", "log")
declare function host_log(level: i32, ptr: usize, len: u32): void;

// optional: plugin state (imported only by a plugin that calls state*)
@external("switchyard", "state_get")
declare function host_state_get(kp: usize, kn: u32, bp: usize, bn: u32): i32;

@external("switchyard", "state_put")
declare function host_state_put(kp: usize, kn: u32, vp: usize, vn: u32, ttl: i32): i32;

@external("switchyard", "state_delete")
declare function host_state_delete(kp: usize, kn: u32): i32;

export const ABI_VERSION: i32 = 1;

/** What a handler returns. */
export enum Verdict {
  /** Publish the emitted outputs (none: the event is dropped). */
  Ok = 0,
  /** Transient failure: the router backs off and retries. Use retry(). */
  Retry = 1,
  /** Permanent failure: the event goes to the dead-letter queue. Use reject(). */
  Reject = 2,
}

export enum Level {
  Trace = 0,
  Debug = 1,
  Info = 2,
  Warn = 3,
  Error = 4,
}

/** Output flags (ABI v1). */
export const FLAG_KEY: u8 = 1;
export const FLAG_HEADERS: u8 = 2;
export const FLAG_DATA: u8 = 4;
export const FLAG_ID: u8 = 8;

// ---- UTF-8 helpers ----------------------------------------------------------

/** Calls fn-like host imports with a string as UTF-8, without leaking it. */
function withUTF8(s: string, level: i32, kind: i32): void {
  const n = <u32>String.UTF8.byteLength(s, false);
  const buf = heap.alloc(n > 0 ? <usize>n : 1);
  String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, buf, false);
  if (kind == 0) host_log(level, buf, n);
  else host_fail(buf, n);
  heap.free(buf);
}

/** Sends a line to the router's log. */
export function log(level: Level, msg: string): void {
  withUTF8(msg, level, 0);
}

/** Records the reason and returns Verdict.Retry. */
export function retry(reason: string): Verdict {
  withUTF8(reason, 0, 1);
  return Verdict.Retry;
}

/** Records the reason and returns Verdict.Reject (dead-letter queue). */
export function reject(reason: string): Verdict {
  withUTF8(reason, 0, 1);
  return Verdict.Reject;
}

// ---- the event --------------------------------------------------------------

export class Header {
  constructor(public name: string, public value: string) {}
}

/**
 * The event being handled. Each string field is decoded from UTF-8 the first
 * time it is read (then cached), so a handler pays only for what it reads:
 * under wazero's timeout checks every decoding loop iteration costs.
 */
export class Event {
  // raw UTF-8 (pointer, length) of each field, in the input buffer
  private rp: StaticArray<usize> = new StaticArray<usize>(12);
  private rHeadersAt: usize = 0;
  private rHeadersCount: u32 = 0;
  private cId: string | null = null;
  private cType: string | null = null;
  private cSource: string | null = null;
  private cSubject: string | null = null;
  private cKey: string | null = null;
  private cHeaders: Header[] | null = null;
  /** Where the data bytes are in memory (valid during the handler only). */
  dataPtr: usize = 0;
  dataLen: u32 = 0;

  private field(i: i32): string {
    const n = unchecked(this.rp[i * 2 + 1]);
    return n == 0 ? "" : String.UTF8.decodeUnsafe(unchecked(this.rp[i * 2]), n, false);
  }

  get id(): string {
    let v = this.cId;
    if (v === null) this.cId = v = this.field(0);
    return v;
  }
  get type(): string {
    let v = this.cType;
    if (v === null) this.cType = v = this.field(1);
    return v;
  }
  get source(): string {
    let v = this.cSource;
    if (v === null) this.cSource = v = this.field(2);
    return v;
  }
  get subject(): string {
    let v = this.cSubject;
    if (v === null) this.cSubject = v = this.field(3);
    return v;
  }
  /** The partition key ("" when none). */
  get key(): string {
    let v = this.cKey;
    if (v === null) this.cKey = v = this.field(4);
    return v;
  }
  /** The headers, in order (the array is the event's; copy it to modify it). */
  get headers(): Header[] {
    let v = this.cHeaders;
    if (v === null) {
      v = new Array<Header>();
      rdPos = this.rHeadersAt;
      rdEnd = this.dataPtr; // validated already
      rdBad = false;
      for (let i: u32 = 0; i < this.rHeadersCount; i++) {
        const name = rdStr();
        const value = rdStr();
        v.push(new Header(name, value));
      }
      this.cHeaders = v;
    }
    return v;
  }

  /**
   * The first header called name (exact match), or null. It compares the
   * raw UTF-8 bytes and decodes only the value it returns: converting every
   * header to a string first cost several µs per event.
   */
  header(name: string): string | null {
    const hs = this.cHeaders;
    if (hs !== null) {
      for (let i = 0; i < hs.length; i++) {
        const h = unchecked(hs[i]);
        if (h.name == name) return h.value;
      }
      return null;
    }
    const want = String.UTF8.encode(name, false);
    const wantLen = <u32>want.byteLength;
    rdPos = this.rHeadersAt;
    rdEnd = this.dataPtr; // validated already
    rdBad = false;
    for (let i: u32 = 0; i < this.rHeadersCount; i++) {
      const n = rdSkip();
      const at = rdPos - n;
      const vn = rdSkip();
      if (rdBad) return null;
      if (n == wantLen && memory.compare(at, changetype<usize>(want), n) == 0) {
        return vn == 0 ? "" : String.UTF8.decodeUnsafe(rdPos - vn, vn, false);
      }
    }
    return null;
  }

  /** The data decoded as UTF-8 text. */
  dataString(): string {
    return String.UTF8.decodeUnsafe(this.dataPtr, this.dataLen, false);
  }

  /** A copy of the data. */
  data(): Uint8Array {
    const a = new Uint8Array(this.dataLen);
    memory.copy(a.dataStart, this.dataPtr, this.dataLen);
    return a;
  }

  /** @hidden Decodes the envelope's layout (no strings yet); false if malformed. */
  static parse(ev: Event, p: usize, n: usize): bool {
    if (n < 1 || load<u8>(p) != 1) return false;
    rdPos = p + 1;
    rdEnd = p + n;
    rdBad = false;
    for (let i = 0; i < 5; i++) {
      const len = rdSkip();
      unchecked((ev.rp[i * 2] = rdPos - len));
      unchecked((ev.rp[i * 2 + 1] = len));
    }
    const count = rdU32();
    if (rdBad) return false;
    ev.rHeadersAt = rdPos;
    ev.rHeadersCount = count;
    for (let i: u32 = 0; i < count && !rdBad; i++) {
      rdSkip();
      rdSkip();
    }
    const dl = rdSkip();
    if (rdBad || rdPos != rdEnd) return false;
    ev.dataPtr = rdPos - dl;
    ev.dataLen = dl;
    return true;
  }
}

/**
 * Whether the router accepts name as an output header: a CloudEvents
 * extension name (1 to 64 lower-case ASCII letters and digits) that is not a
 * context attribute (id, source, type, ...). The router also refuses a
 * header twice in one output, and values over 4096 bytes.
 */
export function validHeaderName(name: string): bool {
  const n = name.length;
  if (n == 0 || n > 64) return false;
  for (let i = 0; i < n; i++) {
    const c = name.charCodeAt(i);
    if (!((c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39))) return false;
  }
  return !(name == "specversion" || name == "id" || name == "source" || name == "type" ||
    name == "subject" || name == "time" || name == "datacontenttype" || name == "dataschema" || name == "data");
}

// ---- outputs ------------------------------------------------------------------

/** One message for the router to publish; a null field inherits the input's. */
export class Output {
  /** "kafka.main:orders", "nats.local:orders.eu", or "" for the type's route. */
  destination: string = "";
  /** When not null, replaces the partition key. */
  key: string | null = null;
  /** When not null (even empty), replaces all the input's headers. */
  headers: Header[] | null = null;
  /** When not null (even empty), replaces the data. */
  data: Uint8Array | null = null;
  /**
   * When not null, replaces the event's id. Outputs of one event that go the
   * same way are distinct events and need distinct ids: with the input's id,
   * a consumer that drops repeated events (by source and id) keeps only the
   * first. Derive them from the input's, so that a retry gives the same ids:
   * `ev.id + "/" + i.toString()`.
   */
  id: string | null = null;

  static to(destination: string): Output {
    const o = new Output();
    o.destination = destination;
    return o;
  }

  withKey(key: string): Output {
    this.key = key;
    return this;
  }

  withHeaders(headers: Header[]): Output {
    this.headers = headers;
    return this;
  }

  withData(data: Uint8Array): Output {
    this.data = data;
    return this;
  }

  /** Sets the CloudEvents id (1 to 1024 bytes, no control characters). */
  withId(id: string): Output {
    this.id = id;
    return this;
  }

  /** Sets the data to the UTF-8 bytes of text. */
  withDataString(text: string): Output {
    this.data = Uint8Array.wrap(String.UTF8.encode(text, false));
    return this;
  }
}

// @ts-ignore: decorator
@inline function strSize(s: string): usize {
  return 4 + <usize>String.UTF8.byteLength(s, false);
}

function putStr(p: usize, s: string): usize {
  const n = String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, p + 4, false);
  store<u32>(p, <u32>n);
  return p + 4 + n;
}

/** Hands one output to the router: >= 0 accepted, < 0 refused (malformed or over limits). */
export function emit(o: Output): i32 {
  let size: usize = strSize(o.destination) + 1;
  let flags: u8 = 0;
  const key = o.key;
  const headers = o.headers;
  const data = o.data;
  const id = o.id;
  if (key !== null) {
    flags |= FLAG_KEY;
    size += strSize(key);
  }
  if (headers !== null) {
    flags |= FLAG_HEADERS;
    size += 4;
    for (let i = 0; i < headers.length; i++) {
      const h = unchecked(headers[i]);
      size += strSize(h.name) + strSize(h.value);
    }
  }
  if (data !== null) {
    flags |= FLAG_DATA;
    size += 4 + <usize>data.length;
  }
  if (id !== null) {
    flags |= FLAG_ID;
    size += strSize(id);
  }
  const buf = heap.alloc(size);
  let p = putStr(buf, o.destination);
  store<u8>(p, flags);
  p += 1;
  if (key !== null) p = putStr(p, key);
  if (headers !== null) {
    store<u32>(p, <u32>headers.length);
    p += 4;
    for (let i = 0; i < headers.length; i++) {
      const h = unchecked(headers[i]);
      p = putStr(p, h.name);
      p = putStr(p, h.value);
    }
  }
  if (data !== null) {
    store<u32>(p, <u32>data.length);
    memory.copy(p + 4, data.dataStart, <usize>data.length);
    p += 4 + <usize>data.length;
  }
  if (id !== null) p = putStr(p, id);
  const rc = host_emit(buf, <u32>(p - buf));
  heap.free(buf);
  return rc;
}

/** The input event, unchanged, to the type's configured route. */
export function forward(): i32 {
  return host_emit(FORWARD, 5);
}
const FORWARD = memory.data(5); // empty destination, flags 0

/** The input event, unchanged, to another destination. */
export function emitTo(destination: string): i32 {
  return emit(Output.to(destination));
}

// ---- plugin state (docs/plugin-state.md) --------------------------------------

/** A state call the router could not serve: answer the event with retry. */
export const STATE_FAILED: i32 = -2;

/**
 * The value of `key` in this plugin's state (its namespace for the event's
 * type), or null when there is none; throws (traps, with the reason kept)
 * when the store failed. Reads see the committed state with the writes of
 * this event and of the events before it in the batch.
 */
export function stateGet(key: string): ArrayBuffer | null {
  const k = String.UTF8.encode(key);
  let buf = new ArrayBuffer(256);
  let n = host_state_get(changetype<usize>(k), <u32>k.byteLength, changetype<usize>(buf), <u32>buf.byteLength);
  if (n > buf.byteLength) {
    buf = new ArrayBuffer(n);
    n = host_state_get(changetype<usize>(k), <u32>k.byteLength, changetype<usize>(buf), <u32>buf.byteLength);
  }
  if (n == -1) return null;
  if (n < 0) throw new Error("switchyard: the plugin state is unavailable");
  return buf.slice(0, n);
}

/** stateGet as a UTF-8 string. */
export function stateGetString(key: string): string | null {
  const v = stateGet(key);
  return v === null ? null : String.UTF8.decode(v);
}

/**
 * Sets `key` to `value` for `ttlSeconds` (0: no expiry); returns 0, or
 * STATE_FAILED. The write counts when the event reaches its outcome; a write
 * over a limit rejects the event.
 */
export function statePut(key: string, value: ArrayBuffer, ttlSeconds: i32 = 0): i32 {
  const k = String.UTF8.encode(key);
  return host_state_put(changetype<usize>(k), <u32>k.byteLength, changetype<usize>(value), <u32>value.byteLength, ttlSeconds);
}

/** statePut of a UTF-8 string. */
export function statePutString(key: string, value: string, ttlSeconds: i32 = 0): i32 {
  return statePut(key, String.UTF8.encode(value), ttlSeconds);
}

/** Removes `key` (0 also when it was not there), or STATE_FAILED. */
export function stateDelete(key: string): i32 {
  const k = String.UTF8.encode(key);
  return host_state_delete(changetype<usize>(k), <u32>k.byteLength);
}

// ---- registration -------------------------------------------------------------

let handler: ((ev: Event) => Verdict) | null = null;
let initFn: ((config: Map<string, string>) => Verdict) | null = null;
let config: Map<string, string> = new Map<string, string>();

/** Registers the event handler (call it at top level of the entry file). */
export function onEvent(fn: (ev: Event) => Verdict): void {
  handler = fn;
}

/**
 * Registers a function that gets the plugin's config once per instance,
 * before any event. Return Verdict.Ok, or reject("why") to fail loading.
 * Objects allocated here are kept for the life of the instance.
 */
export function onInit(fn: (config: Map<string, string>) => Verdict): void {
  initFn = fn;
}

/** The plugin's config (empty until sy_init). */
export function getConfig(): Map<string, string> {
  return config;
}

// ---- decoding -----------------------------------------------------------------

let rdPos: usize = 0;
let rdEnd: usize = 0;
let rdBad: bool = false;

function rdU32(): u32 {
  if (rdEnd - rdPos < 4) {
    rdBad = true;
    return 0;
  }
  const v = load<u32>(rdPos);
  rdPos += 4;
  return v;
}

/** Skips a str and returns its length; its bytes start at rdPos - length. */
function rdSkip(): u32 {
  const n = rdU32();
  if (rdBad || <usize>n > rdEnd - rdPos) {
    rdBad = true;
    return 0;
  }
  rdPos += n;
  return n;
}

function rdStr(): string {
  const n = rdSkip();
  if (rdBad || n == 0) return "";
  return String.UTF8.decodeUnsafe(rdPos - n, n, false);
}

function rdPairsInto(out: Header[]): void {
  const n = rdU32();
  if (rdBad) return;
  // each pair takes at least 8 bytes: refuse counts the envelope cannot hold
  if (<u64>n * 8 > <u64>(rdEnd - rdPos)) {
    rdBad = true;
    return;
  }
  for (let i: u32 = 0; i < n && !rdBad; i++) {
    const name = rdStr();
    const value = rdStr();
    out.push(new Header(name, value));
  }
}

// ---- memory: the input buffer and the per-event arena -------------------------

let inBuf: usize = 0;
let inCap: usize = 0;

function ensureInput(n: usize): void {
  if (n <= inCap) return;
  // Grown before the arena mark, so it survives resets (the old one is
  // abandoned under the stub runtime, freed otherwise).
  if (inBuf) heap.free(inBuf);
  let cap: usize = inCap ? inCap : 4096;
  while (cap < n) cap <<= 1;
  inBuf = heap.alloc(cap);
  inCap = cap;
}

// Under --runtime stub, __free only rewinds the heap when given the last
// block. markArena allocates an empty block; releaseArena widens that block's
// size (the word before the pointer, as in AssemblyScript 0.28's rt/stub.ts)
// to reach the current end of the heap, then frees it: the heap is back where
// it was at the mark. A self-test at the first event turns this off (with a
// warning) if the stub's layout ever changes.
let arenaState: i32 = 0; // 0 untested, 1 works, -1 off

function releaseTo(mark: usize): void {
  const end = heap.alloc(0);
  // the heap's end is end + the stub's size of a 0-byte block
  const blockEnd = end + load<u32>(end - 4);
  store<u32>(mark - 4, <u32>(blockEnd - mark));
  heap.free(mark);
}

function arenaWorks(): bool {
  const a = heap.alloc(0);
  heap.alloc(24);
  releaseTo(a);
  const b = heap.alloc(0);
  heap.free(b);
  return a == b;
}

function markArena(): usize {
  if (ASC_RUNTIME != RUNTIME_STUB) return 0;
  if (arenaState == 0) {
    arenaState = arenaWorks() ? 1 : -1;
    if (arenaState < 0) log(Level.Warn, "switchyard sdk: stub arena unavailable, memory grows with every event");
  }
  return arenaState > 0 ? heap.alloc(0) : 0;
}

function releaseArena(mark: usize): void {
  if (ASC_RUNTIME == RUNTIME_STUB) {
    if (mark) releaseTo(mark);
  } else if (ASC_RUNTIME == RUNTIME_MINIMAL) {
    __collect();
  }
}

// ---- exports (re-export these three from the entry file) -----------------------

export function sy_abi_version(): i32 {
  return ABI_VERSION;
}

export function sy_init(configLen: i32): i32 {
  if (configLen < 4) return reject("switchyard sdk: malformed config envelope");
  const buf = heap.alloc(<usize>configLen);
  if (host_input_read(buf, <u32>configLen) != configLen) {
    heap.free(buf);
    return retry("switchyard sdk: config size mismatch");
  }
  rdPos = buf;
  rdEnd = buf + <usize>configLen;
  rdBad = false;
  const pairs = new Array<Header>();
  rdPairsInto(pairs);
  heap.free(buf);
  if (rdBad || rdPos != rdEnd) return reject("switchyard sdk: malformed config envelope");
  config = new Map<string, string>();
  for (let i = 0; i < pairs.length; i++) config.set(pairs[i].name, pairs[i].value);
  const fn = initFn;
  if (fn === null) return Verdict.Ok;
  return fn(config);
}

export function sy_handle(eventLen: i32): i32 {
  const fn = handler;
  if (fn === null) return retry("switchyard sdk: no handler: call onEvent() at top level");
  ensureInput(<usize>eventLen);
  const mark = markArena();
  let verdict: i32;
  if (host_input_read(inBuf, <u32>eventLen) != eventLen) {
    verdict = retry("switchyard sdk: event size mismatch");
  } else {
    const ev = decodeEvent(inBuf, <usize>eventLen);
    verdict = ev === null ? reject("switchyard sdk: malformed event envelope") : fn(ev);
  }
  releaseArena(mark);
  return verdict;
}

function decodeEvent(p: usize, n: usize): Event | null {
  const ev = new Event();
  return Event.parse(ev, p, n) ? ev : null;
}

// ---- abort ------------------------------------------------------------------------

/**
 * Replaces AssemblyScript's `env.abort` import (the router refuses imports
 * other than switchyard.* and wasi_snapshot_preview1.*): build with
 *   --use abort=~lib/@switchyard-router/sdk-assemblyscript/assembly/index/abort
 * It logs the message and its place, records it as the failure reason, and
 * traps: the router retries the event on a fresh instance.
 */
export function abort(message: string | null, fileName: string | null, lineNumber: u32, columnNumber: u32): void {
  let msg = "abort: " + (message !== null ? message : "(no message)");
  if (fileName !== null) msg += " at " + fileName + ":" + lineNumber.toString() + ":" + columnNumber.toString();
  log(Level.Error, msg);
  withUTF8(msg, 0, 1);
  unreachable();
}
