//! threshold-rust: sends each reading on along its type's route, and emits
//! an alert to its own destination when a key's value crosses the
//! threshold upward — once per crossing, not on every reading above it. The
//! side of the threshold each key was last on lives in the plugin's state
//! (docs/plugin-state.md), so a crossing is alerted once even across
//! restarts and retries.
//!
//! The reading's data is a JSON number (`42.5`) or an object with a numeric
//! field named by the config's `field` (`{"celsius": 42.5}`); its key is the
//! partition key, else the subject.
//!
//! Config: threshold = "30" (required), alert_destination =
//! "nats.local:alerts" (required), field = "celsius" (optional).

#[macro_use]
#[path = "../../../sdk/rust/switchyard.rs"]
mod switchyard;

use switchyard::{Config, Event, Output, Verdict};

fn init(cfg: &Config) -> Result<(), String> {
    match cfg.get("threshold").map(|t| t.parse::<f64>()) {
        Some(Ok(_)) => {}
        _ => return Err("threshold: config needs threshold, a number".to_string()),
    }
    if cfg.get("alert_destination").unwrap_or_default().is_empty() {
        return Err("threshold: config needs alert_destination".to_string());
    }
    Ok(())
}

/// The number in data: the whole of it, or the value of `"field":`.
fn reading(data: &[u8], field: Option<&str>) -> Option<f64> {
    let text = std::str::from_utf8(data).ok()?.trim();
    let num = match field {
        None => text,
        Some(f) => {
            let at = text.find(&format!("\"{}\"", f))? + f.len() + 2;
            let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
            let end = rest.find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c))).unwrap_or(rest.len());
            &rest[..end]
        }
    };
    num.parse().ok()
}

fn handle(ev: &Event) -> Verdict {
    let cfg = switchyard::config();
    let threshold: f64 = cfg.get("threshold").unwrap_or_default().parse().unwrap_or(0.0);
    let key = if ev.key.is_empty() { ev.subject } else { ev.key };
    if key.is_empty() {
        return switchyard::reject("threshold: the event has neither a partition key nor a subject");
    }
    let value = match reading(ev.data, cfg.get("field")) {
        Some(v) => v,
        None => return switchyard::reject("threshold: data is not a number (or has no such field)"),
    };
    let above = value > threshold;
    let was_above = match switchyard::state_get(key.as_bytes()) {
        Ok(v) => v.as_deref() == Some(b"above"),
        Err(e) => return switchyard::retry(&e.to_string()),
    };
    if above != was_above {
        let side: &[u8] = if above { b"above" } else { b"below" };
        if let Err(e) = switchyard::state_put(key.as_bytes(), side, 0) {
            return switchyard::retry(&e.to_string());
        }
    }
    if above && !was_above {
        let dest = cfg.get("alert_destination").unwrap_or_default();
        if let Err(e) = switchyard::emit(&Output::to(dest)) {
            return switchyard::reject(&e.to_string());
        }
    }
    match switchyard::forward() {
        Ok(()) => Verdict::Ok,
        Err(e) => switchyard::reject(&e.to_string()),
    }
}

switchyard_plugin!(handle, init = init);

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard::{run, TestEvent};

    // One alert per upward crossing, per key.
    #[test]
    fn alerts_once_per_crossing() {
        let cfg = [("threshold", "30"), ("alert_destination", "nats.local:alerts"), ("field", "celsius")];
        let mut alerts = vec![];
        for (key, c) in [("a", "25"), ("a", "31"), ("a", "35"), ("b", "40"), ("a", "20"), ("a", "32")] {
            let ev = TestEvent { key: key.into(), data: format!("{{\"celsius\": {}}}", c).into_bytes(), ..Default::default() };
            let r = run(&cfg, Some(sy_init), sy_handle, &ev);
            assert_eq!(r.verdict, 0, "{}={}: {}", key, c, r.reason);
            alerts.push(r.outputs.len() == 2);
        }
        assert_eq!(alerts, vec![false, true, false, true, false, true]);
    }
}
