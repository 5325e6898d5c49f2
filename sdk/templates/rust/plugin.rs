//! __NAME__ sends each event on along its type's route with the header
//! "greeting" set (replacing one the event has), and filters out events whose type ends in ".noise".

#[macro_use]
mod switchyard; // switchyard.rs beside this file

use switchyard::{Event, Output, Verdict};

fn handle(ev: &Event) -> Verdict {
    if ev.ty.ends_with(".noise") {
        return Verdict::Ok; // no output: the event is filtered
    }
    let greeting = match switchyard::config().get("greeting") {
        Some(g) if !g.is_empty() => g,
        _ => "hello",
    };
    // headers, when set, replace the input's: copy them but a "greeting"
    // the event has (a name given twice is refused), and set it
    let mut headers = ev.headers.clone();
    headers.retain(|(name, _)| *name != "greeting");
    headers.push(("greeting", greeting));
    // "" = the type's route
    match switchyard::emit(&Output::to("").with_headers(&headers)) {
        Ok(()) => Verdict::Ok,
        Err(e) => switchyard::reject(&e.to_string()),
    }
}

switchyard_plugin!(handle);
