//! Rust guest SDK for Switchyard plugins (plugin ABI v1).
//!
//! One file, no dependencies, std only; builds with rustc 1.63 (Debian 12's)
//! and later. Include it as a module named `switchyard` at the crate root:
//!
//! ```ignore
//! #[macro_use]
//! #[path = "switchyard.rs"] // wherever you put it
//! mod switchyard;
//! use switchyard::{Event, Verdict};
//!
//! fn handle(ev: &Event) -> Verdict {
//!     if ev.ty == "debug.noise" {
//!         return Verdict::Ok; // no output: dropped
//!     }
//!     match switchyard::forward() {
//!         Ok(()) => Verdict::Ok,
//!         Err(e) => switchyard::retry(&e.to_string()),
//!     }
//! }
//!
//! switchyard_plugin!(handle);
//! ```
//!
//! Build:
//!
//! ```text
//! /usr/bin/rustc --edition 2021 --crate-type cdylib --target wasm32-unknown-unknown \
//!   -C opt-level=s -C lto -C strip=symbols -C linker=wasm-ld -o plugin.wasm plugin.rs
//! ```
//!
//! On other targets the host imports are simulated in memory (see
//! [`run`]), so `rustc --test plugin.rs && ./plugin` runs a plugin's unit
//! tests on the developer's machine.

#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::fmt;

/// The plugin ABI version (what `sy_abi_version` returns).
pub const ABI_VERSION: i32 = 1;

/// Output flags: which optional fields follow the destination.
pub const FLAG_KEY: u8 = 1;
pub const FLAG_HEADERS: u8 = 2;
pub const FLAG_DATA: u8 = 4;
pub const FLAG_ID: u8 = 8;

// ---- host imports -------------------------------------------------------------

#[cfg(target_arch = "wasm32")]
mod host {
    #[link(wasm_import_module = "switchyard")]
    extern "C" {
        #[link_name = "input_read"]
        fn sy_input_read(ptr: *mut u8, len: u32) -> i32;
        #[link_name = "emit"]
        fn sy_emit(ptr: *const u8, len: u32) -> i32;
        #[link_name = "fail"]
        fn sy_fail(ptr: *const u8, len: u32);
        #[link_name = "state_get"]
        fn sy_state_get(kp: *const u8, kn: u32, bp: *mut u8, bn: u32) -> i32;
        #[link_name = "state_put"]
        fn sy_state_put(kp: *const u8, kn: u32, vp: *const u8, vn: u32, ttl: i32) -> i32;
        #[link_name = "state_delete"]
        fn sy_state_delete(kp: *const u8, kn: u32) -> i32;
        #[link_name = "log"]
        fn sy_log(level: i32, ptr: *const u8, len: u32);
    }

    pub fn input_read(buf: &mut [u8]) -> i32 {
        unsafe { sy_input_read(buf.as_mut_ptr(), buf.len() as u32) }
    }
    pub fn emit(b: &[u8]) -> i32 {
        unsafe { sy_emit(b.as_ptr(), b.len() as u32) }
    }
    pub fn fail(s: &str) {
        unsafe { sy_fail(s.as_ptr(), s.len() as u32) }
    }
    pub fn state_get(key: &[u8], buf: &mut [u8]) -> i32 {
        unsafe { sy_state_get(key.as_ptr(), key.len() as u32, buf.as_mut_ptr(), buf.len() as u32) }
    }
    pub fn state_put(key: &[u8], value: &[u8], ttl: i32) -> i32 {
        unsafe { sy_state_put(key.as_ptr(), key.len() as u32, value.as_ptr(), value.len() as u32, ttl) }
    }
    pub fn state_delete(key: &[u8]) -> i32 {
        unsafe { sy_state_delete(key.as_ptr(), key.len() as u32) }
    }
    pub fn log(level: i32, s: &str) {
        unsafe { sy_log(level, s.as_ptr(), s.len() as u32) }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod host {
    //! In-memory stand-ins for the host imports, for unit tests.
    use std::cell::RefCell;

    #[derive(Default)]
    pub struct Sim {
        pub input: Vec<u8>,
        pub outputs: Vec<Vec<u8>>,
        pub reason: String,
        pub logs: Vec<(i32, String)>,
        /// The first output refused, and why.
        pub refused: Option<String>,
        /// The plugin's state: kept across `run` calls, as the router keeps it.
        pub state: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    }

    thread_local! {
        pub static SIM: RefCell<Sim> = RefCell::new(Sim::default());
    }

    pub fn input_read(buf: &mut [u8]) -> i32 {
        SIM.with(|s| {
            let s = s.borrow();
            let n = buf.len().min(s.input.len());
            buf[..n].copy_from_slice(&s.input[..n]);
            s.input.len() as i32
        })
    }
    /// Takes an output as the router does: after a refusal every emit of
    /// the call is -1; one over the default `limits.max_outputs` -2; one
    /// whose envelope is over the default `limits.max_output_bytes` -3; a
    /// malformed or refused one -1 ([`super::check_output`] says why, in
    /// `RunResult::refused`).
    pub fn emit(b: &[u8]) -> i32 {
        let checked = match super::decode_output(b) {
            None => Err("the output envelope is malformed".to_string()),
            Some(o) => super::check_output(&o),
        };
        SIM.with(|s| {
            let mut s = s.borrow_mut();
            if s.refused.is_some() {
                return -1; // the call already failed: the router keeps it failed
            }
            let n = s.outputs.len() + 1;
            let (rc, why) = match checked {
                _ if n > super::DEFAULT_MAX_OUTPUTS => {
                    (-2, format!("over limits.max_outputs ({} by default)", super::DEFAULT_MAX_OUTPUTS))
                }
                _ if b.len() > super::DEFAULT_MAX_OUTPUT_BYTES => {
                    (-3, format!("over limits.max_output_bytes (1 MiB by default): its envelope is {} bytes", b.len()))
                }
                Err(why) => (-1, why),
                Ok(()) => {
                    s.outputs.push(b.to_vec());
                    return 0;
                }
            };
            s.refused = Some(format!("output {} refused: {}", n, why));
            rc
        })
    }
    pub fn fail(r: &str) {
        SIM.with(|s| s.borrow_mut().reason = r.to_string());
    }
    pub fn state_get(key: &[u8], buf: &mut [u8]) -> i32 {
        SIM.with(|s| match s.borrow().state.get(key) {
            Some(v) => {
                let n = buf.len().min(v.len());
                buf[..n].copy_from_slice(&v[..n]);
                v.len() as i32
            }
            None => -1,
        })
    }
    pub fn state_put(key: &[u8], value: &[u8], _ttl: i32) -> i32 {
        SIM.with(|s| s.borrow_mut().state.insert(key.to_vec(), value.to_vec()));
        0
    }
    pub fn state_delete(key: &[u8]) -> i32 {
        SIM.with(|s| s.borrow_mut().state.remove(key));
        0
    }
    pub fn log(level: i32, m: &str) {
        SIM.with(|s| s.borrow_mut().logs.push((level, m.to_string())));
    }
}

// ---- verdicts, logging --------------------------------------------------------

/// What a handler returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Verdict {
    /// Publish the emitted outputs (none: the event is dropped).
    Ok = 0,
    /// Transient failure: back off and retry. Use [`retry`].
    Retry = 1,
    /// Permanent failure: dead-letter queue. Use [`reject`].
    Reject = 2,
}

/// Records `reason` with the router and returns [`Verdict::Retry`].
pub fn retry(reason: &str) -> Verdict {
    host::fail(reason);
    Verdict::Retry
}

/// Records `reason` with the router and returns [`Verdict::Reject`].
pub fn reject(reason: &str) -> Verdict {
    host::fail(reason);
    Verdict::Reject
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Level {
    Trace = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
}

/// Sends a line to the router's log.
pub fn log(level: Level, msg: &str) {
    host::log(level as i32, msg);
}

// ---- envelopes ----------------------------------------------------------------

/// The event being handled; it borrows the SDK's input buffer.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    pub id: &'a str,
    /// The CloudEvents `type` (`type` is a Rust keyword).
    pub ty: &'a str,
    pub source: &'a str,
    pub subject: &'a str,
    /// The partition key ("" when none).
    pub key: &'a str,
    /// Headers in order: extension attributes and pass-through headers.
    pub headers: Vec<(&'a str, &'a str)>,
    pub data: &'a [u8],
}

impl<'a> Event<'a> {
    /// The first header called `name` (exact match).
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// One message for the router to publish. A `None` field inherits the
/// input's; headers, when `Some` (even empty), replace all of the input's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output<'a> {
    /// `"kafka.main:orders"`, `"nats.local:orders.eu"`, or `""` (the type's route).
    pub destination: &'a str,
    pub key: Option<&'a str>,
    pub headers: Option<&'a [(&'a str, &'a str)]>,
    pub data: Option<&'a [u8]>,
    /// Replaces the event's id. Outputs of one event that go the same way
    /// are distinct events and need distinct ids: with the input's id, a
    /// consumer that drops repeated events (by source and id) keeps only
    /// the first. Derive them from the input's, so that a retry gives the
    /// same ids: `let id = format!("{}/{}", ev.id, i);`, then `.with_id(&id)`.
    pub id: Option<&'a str>,
}

impl<'a> Output<'a> {
    /// An output to `destination` that inherits everything else.
    pub fn to(destination: &'a str) -> Self {
        Output { destination, ..Default::default() }
    }
    pub fn with_key(mut self, key: &'a str) -> Self {
        self.key = Some(key);
        self
    }
    pub fn with_headers(mut self, headers: &'a [(&'a str, &'a str)]) -> Self {
        self.headers = Some(headers);
        self
    }
    pub fn with_data(mut self, data: &'a [u8]) -> Self {
        self.data = Some(data);
        self
    }
    /// Sets the CloudEvents id (1 to 1024 bytes, no control characters).
    pub fn with_id(mut self, id: &'a str) -> Self {
        self.id = Some(id);
        self
    }
}

/// Whether the router accepts `name` as an output header: a CloudEvents
/// extension name (1 to 64 lower-case ASCII letters and digits) that is not a
/// context attribute (id, source, type, ...). The router also refuses a
/// header twice in one output, and values over 4096 bytes.
pub fn valid_header_name(name: &str) -> bool {
    const CONTEXT: [&str; 9] = [
        "specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema", "data",
    ];
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && !CONTEXT.contains(&name)
}

/// `limits.max_outputs` unless the plugin's block sets it: the outputs of
/// one call.
#[cfg(not(target_arch = "wasm32"))]
pub const DEFAULT_MAX_OUTPUTS: usize = 16;

/// `limits.max_output_bytes` unless the plugin's block sets it: the bytes
/// of one output's envelope (its destination, key, id, headers and data as
/// `emit` encodes them).
#[cfg(not(target_arch = "wasm32"))]
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1 << 20;

/// Outside wasm only: why the router would refuse `o`, or `Ok`: a
/// destination with white space; a key, id or header value with a control
/// character (U+0000-U+001F, U+007F-U+009F); an empty id or one over 1024
/// bytes; a header name [`valid_header_name`] refuses, a name given twice,
/// a value over 4096 bytes, or more than 256 headers besides `traceparent`
/// and `tracestate`. [`run`]'s host checks every output with it, so that a
/// unit test fails where the router would: it took outputs the router
/// refuses. (The router's own check: plugins/wasm/envelope.go.)
#[cfg(not(target_arch = "wasm32"))]
pub fn check_output(o: &DecodedOutput) -> Result<(), String> {
    if o.destination.contains([' ', '\t', '\r', '\n']) {
        return Err(format!("destination {:?} contains white space", o.destination));
    }
    if let Some(k) = &o.key {
        check_attr("the key", k)?;
    }
    if let Some(id) = &o.id {
        if id.is_empty() {
            return Err("the id is empty".to_string());
        }
        if id.len() > 1024 {
            return Err(format!("the id is {} bytes, over 1024", id.len()));
        }
        check_attr("the id", id)?;
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut exts = 0;
    for (name, value) in o.headers.iter().flatten() {
        if name != "traceparent" && name != "tracestate" {
            exts += 1;
        }
        if !valid_header_name(name) {
            return Err(format!(
                "header name {:?}: names are 1 to 64 lower-case letters and digits, not a context attribute (id, source, type, ...)",
                name
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(format!("header {:?} appears twice", name));
        }
        if value.len() > 4096 {
            return Err(format!("header {:?}: the value is longer than 4096 bytes", name));
        }
        check_attr(&format!("header {:?}", name), value)?;
    }
    if exts > 256 {
        return Err(format!("{} headers: an event has at most 256 extension attributes", exts));
    }
    Ok(())
}

/// What names an attribute's value to CloudEvents' attribute strings: no
/// control characters (a `&str` is UTF-8 already).
#[cfg(not(target_arch = "wasm32"))]
fn check_attr(what: &str, v: &str) -> Result<(), String> {
    match v.char_indices().find(|(_, c)| (*c as u32) <= 0x1f || (0x7f..=0x9f).contains(&(*c as u32))) {
        Some((i, c)) => Err(format!("{} has the control character U+{:04X} at byte {}", what, c as u32, i)),
        None => Ok(()),
    }
}

/// The router refused an output (the negative code `emit` returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmitError(pub i32);

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "output refused by the router (emit returned {})", self.0)
    }
}

impl std::error::Error for EmitError {}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_str(b: &mut Vec<u8>, s: &[u8]) {
    put_u32(b, s.len() as u32);
    b.extend_from_slice(s);
}

/// Appends the output envelope of `o` to `b`.
pub fn encode_output(b: &mut Vec<u8>, o: &Output) {
    put_str(b, o.destination.as_bytes());
    let mut flags = 0u8;
    if o.key.is_some() {
        flags |= FLAG_KEY;
    }
    if o.headers.is_some() {
        flags |= FLAG_HEADERS;
    }
    if o.data.is_some() {
        flags |= FLAG_DATA;
    }
    if o.id.is_some() {
        flags |= FLAG_ID;
    }
    b.push(flags);
    if let Some(k) = o.key {
        put_str(b, k.as_bytes());
    }
    if let Some(hs) = o.headers {
        put_u32(b, hs.len() as u32);
        for (n, v) in hs {
            put_str(b, n.as_bytes());
            put_str(b, v.as_bytes());
        }
    }
    if let Some(d) = o.data {
        put_str(b, d);
    }
    if let Some(id) = o.id {
        put_str(b, id.as_bytes());
    }
}

thread_local! {
    static OUT_BUF: RefCell<Vec<u8>> = RefCell::new(Vec::new());
    static IN_BUF: RefCell<Vec<u8>> = RefCell::new(Vec::new());
    static CONFIG: Cell<&'static Config> = Cell::new(&EMPTY_CONFIG);
}

/// Hands one output to the router. Published only if the handler then
/// returns [`Verdict::Ok`].
pub fn emit(o: &Output) -> Result<(), EmitError> {
    OUT_BUF.with(|b| {
        let mut b = b.borrow_mut();
        b.clear();
        encode_output(&mut b, o);
        match host::emit(&b) {
            rc if rc < 0 => Err(EmitError(rc)),
            _ => Ok(()),
        }
    })
}

/// A state call the router could not serve: answer the event with `retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateError(pub i32);

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "plugin state unavailable (returned {})", self.0)
    }
}

impl std::error::Error for StateError {}

/// The value of `key` in this plugin's state (its namespace for the event's
/// type): the committed state with the writes of this event and of the
/// events before it in the batch (docs/plugin-state.md).
pub fn state_get(key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
    let mut buf = vec![0u8; 256];
    let mut n = host::state_get(key, &mut buf);
    if n >= 0 && n as usize > buf.len() {
        buf = vec![0u8; n as usize];
        n = host::state_get(key, &mut buf);
    }
    match n {
        -1 => Ok(None),
        n if n < 0 => Err(StateError(n)),
        n => {
            buf.truncate(n as usize);
            Ok(Some(buf))
        }
    }
}

/// Sets `key` to `value` for `ttl_seconds` (0: no expiry). The write counts
/// when the event reaches its outcome; a write over a limit rejects it.
pub fn state_put(key: &[u8], value: &[u8], ttl_seconds: u32) -> Result<(), StateError> {
    match host::state_put(key, value, ttl_seconds.min(i32::MAX as u32) as i32) {
        0 => Ok(()),
        rc => Err(StateError(rc)),
    }
}

/// Removes `key` (nothing happens when it is not there).
pub fn state_delete(key: &[u8]) -> Result<(), StateError> {
    match host::state_delete(key) {
        0 => Ok(()),
        rc => Err(StateError(rc)),
    }
}

/// The input event, unchanged, to the type's configured route.
pub fn forward() -> Result<(), EmitError> {
    match host::emit(&[0, 0, 0, 0, 0]) {
        rc if rc < 0 => Err(EmitError(rc)),
        _ => Ok(()),
    }
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn u32(&mut self) -> Option<u32> {
        if self.b.len() < 4 {
            return None;
        }
        let (h, t) = self.b.split_at(4);
        self.b = t;
        Some(u32::from_le_bytes([h[0], h[1], h[2], h[3]]))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        if n > self.b.len() {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    fn pairs(&mut self) -> Option<Vec<(&'a str, &'a str)>> {
        let n = self.u32()? as usize;
        if n.checked_mul(8)? > self.b.len() {
            return None; // each pair takes at least 8 bytes
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push((self.str()?, self.str()?));
        }
        Some(v)
    }
}

/// Decodes an event envelope (None if malformed or not UTF-8 where text is
/// expected).
pub fn decode_event(b: &[u8]) -> Option<Event<'_>> {
    if b.first() != Some(&1) {
        return None;
    }
    let mut r = Reader { b: &b[1..] };
    let ev = Event {
        id: r.str()?,
        ty: r.str()?,
        source: r.str()?,
        subject: r.str()?,
        key: r.str()?,
        headers: r.pairs()?,
        data: r.bytes()?,
    };
    if r.b.is_empty() {
        Some(ev)
    } else {
        None
    }
}

/// A decoded output envelope (owned), as the router sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedOutput {
    pub destination: String,
    pub key: Option<String>,
    pub headers: Option<Vec<(String, String)>>,
    pub data: Option<Vec<u8>>,
    pub id: Option<String>,
}

/// Decodes an output envelope (for tests).
pub fn decode_output(b: &[u8]) -> Option<DecodedOutput> {
    let mut r = Reader { b };
    let destination = r.str()?.to_string();
    let flags = *r.b.first()?;
    r.b = &r.b[1..];
    if flags & !(FLAG_KEY | FLAG_HEADERS | FLAG_DATA | FLAG_ID) != 0 {
        return None;
    }
    let key = if flags & FLAG_KEY != 0 { Some(r.str()?.to_string()) } else { None };
    let headers = if flags & FLAG_HEADERS != 0 {
        Some(r.pairs()?.into_iter().map(|(a, b)| (a.to_string(), b.to_string())).collect())
    } else {
        None
    };
    let data = if flags & FLAG_DATA != 0 { Some(r.bytes()?.to_vec()) } else { None };
    let id = if flags & FLAG_ID != 0 { Some(r.str()?.to_string()) } else { None };
    if !r.b.is_empty() {
        return None;
    }
    Some(DecodedOutput { destination, key, headers, data, id })
}

// ---- config -------------------------------------------------------------------

/// The plugin's config: the `config = {...}` map of its `plugin` block,
/// sorted by key.
#[derive(Debug, Default)]
pub struct Config {
    entries: Vec<(String, String)>,
}

static EMPTY_CONFIG: Config = Config { entries: Vec::new() };

impl Config {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The plugin's config (empty until `sy_init`), for the life of the instance.
pub fn config() -> &'static Config {
    CONFIG.with(|c| c.get())
}

// ---- entry points (used by switchyard_plugin!) -----------------------------------

#[doc(hidden)]
pub fn __init(len: i32, init: fn(&Config) -> Result<(), String>) -> i32 {
    #[cfg(target_arch = "wasm32")]
    keep_panic_messages();
    if len < 4 {
        return reject("switchyard sdk: malformed config envelope") as i32;
    }
    let mut buf = vec![0u8; len as usize];
    if host::input_read(&mut buf) != len {
        return retry("switchyard sdk: config size mismatch") as i32;
    }
    let mut r = Reader { b: &buf };
    let pairs = match r.pairs() {
        Some(p) if r.b.is_empty() => p,
        _ => return reject("switchyard sdk: malformed config envelope") as i32,
    };
    let cfg = Config { entries: pairs.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
    let cfg: &'static Config = Box::leak(Box::new(cfg)); // once per instance
    CONFIG.with(|c| c.set(cfg));
    match init(cfg) {
        Ok(()) => 0,
        Err(e) => reject(&e) as i32,
    }
}

#[doc(hidden)]
pub fn __handle(len: i32, handle: fn(&Event) -> Verdict) -> i32 {
    #[cfg(target_arch = "wasm32")]
    keep_panic_messages();
    if len < 0 {
        return reject("switchyard sdk: malformed event envelope") as i32;
    }
    IN_BUF.with(|b| {
        let mut buf = b.borrow_mut();
        buf.clear();
        buf.resize(len as usize, 0);
        if host::input_read(&mut buf) != len {
            return retry("switchyard sdk: event size mismatch") as i32;
        }
        match decode_event(&buf) {
            Some(ev) => handle(&ev) as i32,
            None => reject("switchyard sdk: malformed event envelope (or text that is not UTF-8)") as i32,
        }
    })
}

/// A panic traps (`panic=abort` on wasm32): before it does, this hook hands
/// the panic's message and place to the host through `fail`, so the
/// router's reason says "panicked at ..." instead of only "unreachable".
#[cfg(target_arch = "wasm32")]
fn keep_panic_messages() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| host::fail(&info.to_string())));
    });
}

/// `switchyard_plugin!(handle)` or `switchyard_plugin!(handle, init = init)`
/// defines the module's exports: `sy_abi_version`, `sy_handle` calling
/// `fn handle(&Event) -> Verdict`, and with `init`, `sy_init` calling
/// `fn init(&Config) -> Result<(), String>` (an `Err` fails loading the
/// plugin with that message). Use it once, at the crate root, with the SDK
/// module named `switchyard`.
#[macro_export]
macro_rules! switchyard_plugin {
    ($handle:path) => {
        #[no_mangle]
        pub extern "C" fn sy_abi_version() -> i32 {
            crate::switchyard::ABI_VERSION
        }
        #[no_mangle]
        pub extern "C" fn sy_handle(event_len: i32) -> i32 {
            crate::switchyard::__handle(event_len, $handle)
        }
    };
    ($handle:path, init = $init:path) => {
        switchyard_plugin!($handle);
        #[no_mangle]
        pub extern "C" fn sy_init(config_len: i32) -> i32 {
            crate::switchyard::__init(config_len, $init)
        }
    };
}

// ---- testing outside wasm --------------------------------------------------------

/// What [`run`] observed.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug)]
pub struct RunResult {
    /// The init's return code, if init ran (0 ok).
    pub init: i32,
    /// The verdict code (0 ok, 1 retry, 2 reject); -1 when init failed.
    pub verdict: i32,
    pub reason: String,
    pub outputs: Vec<DecodedOutput>,
    pub logs: Vec<(i32, String)>,
    /// The first output the router would have refused, and why (`emit`
    /// failed then, as in the router, and the router rejects the event).
    pub refused: Option<String>,
}

/// The event a test hands to [`run`].
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Default, Clone)]
pub struct TestEvent {
    pub id: String,
    pub ty: String,
    pub source: String,
    pub subject: String,
    pub key: String,
    pub headers: Vec<(String, String)>,
    pub data: Vec<u8>,
}

/// Outside wasm only: empties the simulated plugin state, which [`run`]
/// keeps from call to call as the router keeps it from event to event.
#[cfg(not(target_arch = "wasm32"))]
pub fn reset_state() {
    host::SIM.with(|s| s.borrow_mut().state.clear());
}

/// Outside wasm only: runs `sy_init` (if `init` is given) with `config`
/// and then `sy_handle` with `ev`, through real envelopes, as the router
/// would on a fresh instance.
#[cfg(not(target_arch = "wasm32"))]
pub fn run(
    config: &[(&str, &str)],
    init: Option<extern "C" fn(i32) -> i32>,
    handle: extern "C" fn(i32) -> i32,
    ev: &TestEvent,
) -> RunResult {
    host::SIM.with(|s| {
        let state = std::mem::take(&mut s.borrow_mut().state); // kept from run to run
        *s.borrow_mut() = host::Sim { state, ..Default::default() };
    });
    CONFIG.with(|c| c.set(&EMPTY_CONFIG));
    let mut cfg: Vec<(&str, &str)> = config.to_vec();
    cfg.sort();
    let mut b = Vec::new();
    put_u32(&mut b, cfg.len() as u32);
    for (k, v) in &cfg {
        put_str(&mut b, k.as_bytes());
        put_str(&mut b, v.as_bytes());
    }
    let mut rc = 0;
    if let Some(init) = init {
        let n = b.len() as i32;
        host::SIM.with(|s| s.borrow_mut().input = b);
        rc = init(n);
    }
    let mut verdict = -1;
    if rc == 0 {
        let mut e = vec![1u8];
        for s in [&ev.id, &ev.ty, &ev.source, &ev.subject, &ev.key] {
            put_str(&mut e, s.as_bytes());
        }
        put_u32(&mut e, ev.headers.len() as u32);
        for (k, v) in &ev.headers {
            put_str(&mut e, k.as_bytes());
            put_str(&mut e, v.as_bytes());
        }
        put_str(&mut e, &ev.data);
        let n = e.len() as i32;
        host::SIM.with(|s| s.borrow_mut().input = e);
        verdict = handle(n);
    }
    host::SIM.with(|s| {
        let s = s.borrow();
        RunResult {
            init: rc,
            verdict,
            reason: s.reason.clone(),
            outputs: s.outputs.iter().map(|o| decode_output(o).unwrap()).collect(),
            logs: s.logs.clone(),
            refused: s.refused.clone(),
        }
    })
}

// ---- the SDK's own tests (examples/plugins/build.sh runs them: rustc --test)

#[cfg(test)]
mod tests {
    use super::*;

    fn out(headers: &[(&str, &str)]) -> DecodedOutput {
        DecodedOutput {
            destination: String::new(),
            key: None,
            headers: Some(headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()),
            data: None,
            id: None,
        }
    }

    /// check_output refuses what the router refuses (the same cases as the
    /// router's TestSDKChecksOutputsAsTheRouterDoes), and takes what it takes.
    #[test]
    fn check_output_holds_the_routers_rules() {
        let long = "v".repeat(4097);
        let many: Vec<(String, String)> = (0..257).map(|i| (format!("h{}", i), "v".to_string())).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        for (name, o, ok) in [
            ("a good header", out(&[("tier", "vip"), ("traceparent", "00-x")]), true),
            ("header name", out(&[("Tier", "x")]), false),
            ("context attribute", out(&[("type", "x")]), false),
            ("C1 control in a value", out(&[("a", "x\u{85}")]), false),
            ("CR LF in a value", out(&[("a", "x\r\ny")]), false),
            ("long header value", out(&[("a", &long)]), false),
            ("duplicate header", out(&[("a", "1"), ("a", "2")]), false),
            ("too many headers", out(&many), false),
            ("destination", DecodedOutput { destination: "nats.local: x".into(), ..out(&[]) }, false),
            ("empty id", DecodedOutput { id: Some(String::new()), ..out(&[]) }, false),
            ("long id", DecodedOutput { id: Some("i".repeat(1025)), ..out(&[]) }, false),
            ("CR LF in the key", DecodedOutput { key: Some("k\r\n".into()), ..out(&[]) }, false),
        ] {
            assert_eq!(check_output(&o).is_ok(), ok, "{}: {:?}", name, check_output(&o));
        }
    }

    fn handle_many(ev: &Event) -> Verdict {
        let n = ev.headers.iter().find(|(k, _)| *k == "n").map(|(_, v)| v.len()).unwrap_or(0);
        for _ in 0..n {
            if emit(&Output::to("nats.local:a").with_headers(&[("tier", "vip")])).is_err() {
                return Verdict::Reject;
            }
        }
        if ev.headers.iter().any(|(k, _)| *k == "big") {
            let _ = emit(&Output::to("nats.local:a").with_data(&vec![0u8; DEFAULT_MAX_OUTPUT_BYTES]));
        }
        if ev.headers.iter().any(|(k, _)| *k == "bad") {
            let _ = emit(&Output::to("nats.local:a b"));
        }
        Verdict::Ok
    }

    extern "C" fn emit_many(len: i32) -> i32 {
        __handle(len, handle_many)
    }

    /// run's host refuses an output the router refuses, one past the
    /// default limits.max_outputs and one over the default
    /// limits.max_output_bytes, and says why: it took them.
    #[test]
    fn run_refuses_what_the_router_refuses() {
        let ev = |k: &str, v: &str| TestEvent { id: "e1".into(), headers: vec![(k.into(), v.into())], ..Default::default() };
        let r = run(&[], None, emit_many, &ev("n", "x"));
        assert_eq!((r.outputs.len(), r.refused.clone()), (1, None));
        let r = run(&[], None, emit_many, &ev("bad", "1"));
        assert_eq!(r.refused.as_deref(), Some("output 1 refused: destination \"nats.local:a b\" contains white space"));
        let r = run(&[], None, emit_many, &ev("n", &"x".repeat(17)));
        assert_eq!(r.refused.as_deref(), Some("output 17 refused: over limits.max_outputs (16 by default)"));
        let r = run(&[], None, emit_many, &ev("big", "1"));
        assert!(r.refused.as_deref().unwrap_or("").starts_with("output 1 refused: over limits.max_output_bytes (1 MiB by default)"), "{:?}", r.refused);
    }
}
