//! split-rust: turns one event whose data is a JSON array into one output per
//! element, each carrying that element's JSON text as its data and an id of
//! its own, `<the event's id>/<index>`.
//!
//! Config (all optional):
//!   destination  = "nats.local:items"  where the outputs go ("" = the type's route)
//!   index_header = "splitindex"       adds this header, the element's index
//!                                      (0-based), to the input's headers
//!
//! An empty array yields no output (the event is dropped). Data that is not a
//! JSON array is rejected. The router caps the outputs of one event at the
//! plugin's limits.max_outputs (default 16): raise it for longer arrays. The splitting is deliberately minimal (no
//! dependencies): it finds the top-level elements, matching brackets and
//! braces and skipping strings with their escapes, and does not check that
//! scalars are valid JSON.

#[macro_use]
#[path = "../../../sdk/rust/switchyard.rs"]
mod switchyard;

use switchyard::{Config, Event, Output, Verdict};

fn init(cfg: &Config) -> Result<(), String> {
    for (k, v) in cfg.iter() {
        match k {
            "destination" => {}
            "index_header" if switchyard::valid_header_name(v) => {}
            "index_header" => {
                return Err(format!(
                    "split-rust: index_header {:?} is not a header name (1 to 64 lower-case letters and digits, not a CloudEvents attribute)",
                    v
                ))
            }
            _ => {
                return Err(format!(
                    "split-rust: unknown config key {:?} (want destination, index_header)",
                    k
                ))
            }
        }
    }
    Ok(())
}

fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_ws(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_ws(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// Splits a JSON array into the raw text of its top-level elements.
fn split_array(data: &[u8]) -> Result<Vec<&[u8]>, String> {
    let d = trim(data);
    if d.first() != Some(&b'[') || d.last() != Some(&b']') {
        return Err("data is not a JSON array".to_string());
    }
    let body = &d[1..d.len() - 1];
    let mut out = Vec::new();
    if trim(body).is_empty() {
        return Ok(out);
    }
    let mut stack: Vec<u8> = Vec::new(); // expected closers
    let mut in_str = false;
    let mut esc = false;
    let mut start = 0;
    for (i, &c) in body.iter().enumerate() {
        if in_str {
            if esc {
                esc = false;
            } else if c == b'\\' {
                esc = true;
            } else if c == b'"' {
                in_str = false;
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'[' => stack.push(b']'),
            b'{' => stack.push(b'}'),
            b']' | b'}' => {
                if stack.pop() != Some(c) {
                    return Err(format!("unbalanced {:?} at byte {}", c as char, i + 1));
                }
            }
            b',' if stack.is_empty() => {
                let e = trim(&body[start..i]);
                if e.is_empty() {
                    return Err(format!("empty element before byte {}", i + 1));
                }
                out.push(e);
                start = i + 1;
            }
            _ => {}
        }
    }
    if in_str {
        return Err("unterminated string".to_string());
    }
    if !stack.is_empty() {
        return Err("unbalanced brackets".to_string());
    }
    let e = trim(&body[start..]);
    if e.is_empty() {
        return Err("empty last element".to_string());
    }
    out.push(e);
    Ok(out)
}

fn handle(ev: &Event) -> Verdict {
    let elems = match split_array(ev.data) {
        Ok(e) => e,
        Err(e) => return switchyard::reject(&format!("split-rust: {}", e)),
    };
    let cfg = switchyard::config();
    let dest = cfg.get("destination").unwrap_or("");
    let index_header = cfg.get("index_header");
    // The input's headers without the index header (only if one is configured).
    let base: Vec<(&str, &str)> = match index_header {
        Some(name) => ev.headers.iter().copied().filter(|(n, _)| *n != name).collect(),
        None => Vec::new(),
    };
    for (i, elem) in elems.iter().enumerate() {
        let idx = i.to_string();
        // Each element is an event of its own: with the input's id, a
        // consumer that drops repeated events would keep only the first.
        // Derived, so a retry of the event gives the same ids.
        let id = format!("{}/{}", ev.id, i);
        let mut headers = Vec::new();
        let mut out = Output::to(dest).with_data(elem).with_id(&id);
        if let Some(name) = index_header {
            headers.reserve(base.len() + 1);
            headers.extend_from_slice(&base);
            headers.push((name, idx.as_str()));
            out = out.with_headers(&headers);
        }
        if let Err(e) = switchyard::emit(&out) {
            return switchyard::retry(&format!("split-rust: {}", e));
        }
    }
    Verdict::Ok
}

switchyard_plugin!(handle, init = init);

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard::{run, TestEvent};

    #[test]
    fn splits() {
        let cases: &[(&str, &[&str])] = &[
            ("[]", &[]),
            (" [ ] ", &[]),
            ("[1]", &["1"]),
            ("[1, \"a,]\\\"\" ,{\"x\":[1,2]}, [3,{}] ,null]", &["1", "\"a,]\\\"\"", "{\"x\":[1,2]}", "[3,{}]", "null"]),
        ];
        for (input, want) in cases {
            let got = split_array(input.as_bytes()).unwrap();
            let got: Vec<&str> = got.iter().map(|e| std::str::from_utf8(e).unwrap()).collect();
            assert_eq!(&got, want, "{}", input);
        }
        for bad in ["", "{}", "[1,]", "[,1]", "[1,2", "[\"a]", "[1}]", "[[1]", "1"] {
            assert!(split_array(bad.as_bytes()).is_err(), "{} accepted", bad);
        }
    }

    #[test]
    fn through_envelopes() {
        let ev = TestEvent {
            id: "e1".into(),
            ty: "batch".into(),
            headers: vec![("traceparent".into(), "00-x".into()), ("splitindex".into(), "old".into())],
            data: br#"[{"a":1},{"b":2}]"#.to_vec(),
            ..Default::default()
        };
        let r = run(&[("destination", "nats.local:items"), ("index_header", "splitindex")], Some(sy_init), sy_handle, &ev);
        assert_eq!(r.verdict, 0, "{:?}", r);
        assert_eq!(r.outputs.len(), 2);
        assert_eq!(r.outputs[1].destination, "nats.local:items");
        assert_eq!(r.outputs[1].data.as_deref(), Some(&br#"{"b":2}"#[..]));
        assert_eq!(r.outputs[0].id.as_deref(), Some("e1/0"));
        assert_eq!(r.outputs[1].id.as_deref(), Some("e1/1"));
        let hs = r.outputs[1].headers.clone().unwrap();
        assert_eq!(hs, vec![("traceparent".to_string(), "00-x".to_string()), ("splitindex".to_string(), "1".to_string())]);

        let r = run(&[], Some(sy_init), sy_handle, &TestEvent { data: b"{}".to_vec(), ..Default::default() });
        assert_eq!(r.verdict, 2);
        assert!(r.reason.contains("not a JSON array"), "{}", r.reason);

        let r = run(&[("bogus", "1")], Some(sy_init), sy_handle, &TestEvent::default());
        assert_eq!(r.init, 2);
        let r = run(&[("index_header", "split-index")], Some(sy_init), sy_handle, &TestEvent::default());
        assert_eq!(r.init, 2);

        let r = run(&[], Some(sy_init), sy_handle, &TestEvent { id: "e2".into(), data: b"[1,2,3]".to_vec(), ..Default::default() });
        assert_eq!(r.outputs.len(), 3);
        assert_eq!(
            r.outputs[2],
            switchyard::DecodedOutput { destination: "".into(), key: None, headers: None, data: Some(b"3".to_vec()), id: Some("e2/2".into()) }
        );
    }
}
