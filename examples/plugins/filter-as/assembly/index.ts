// filter-as: drops events by type or by header; lets the others through
// unchanged to their type's route.
//
// Config (both optional, at least one is useful):
//   drop_types     = "debug.noise,audit.*"    comma-separated event types;
//                                             a trailing * matches a prefix
//   drop_if_header = "env=test,synthetic"     comma-separated name=value (the
//                                             header has that value) or name
//                                             (the header is present)
// An event matching any rule is dropped: the plugin returns ok with no output.
import {
  Event, Verdict, Level, forward, getConfig, log, onEvent, onInit, reject, retry,
} from "@switchyard-router/sdk-assemblyscript/assembly";

export { sy_abi_version, sy_init, sy_handle } from "@switchyard-router/sdk-assemblyscript/assembly";

// Kept for the life of the instance: allocated in init.
const exactTypes = new Set<string>();
const typePrefixes = new Array<string>();
const headerNames = new Array<string>();
const headerValues = new Array<string | null>(); // null: presence is enough

function splitList(s: string): string[] {
  const out = new Array<string>();
  const parts = s.split(",");
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i].trim();
    if (p.length > 0) out.push(p);
  }
  return out;
}

onInit((config: Map<string, string>): Verdict => {
  const keys = config.keys();
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i];
    if (k != "drop_types" && k != "drop_if_header") {
      return reject("filter-as: unknown config key \"" + k + "\" (want drop_types, drop_if_header)");
    }
  }
  if (config.has("drop_types")) {
    const types = splitList(config.get("drop_types"));
    for (let i = 0; i < types.length; i++) {
      const t = types[i];
      if (t.endsWith("*")) typePrefixes.push(t.slice(0, t.length - 1));
      else exactTypes.add(t);
    }
  }
  if (config.has("drop_if_header")) {
    const rules = splitList(config.get("drop_if_header"));
    for (let i = 0; i < rules.length; i++) {
      const r = rules[i];
      const eq = r.indexOf("=");
      if (eq == 0) return reject("filter-as: drop_if_header rule \"" + r + "\" has no header name");
      if (eq < 0) {
        headerNames.push(r);
        headerValues.push(null);
      } else {
        headerNames.push(r.slice(0, eq).trim());
        headerValues.push(r.slice(eq + 1).trim());
      }
    }
  }
  if (exactTypes.size == 0 && typePrefixes.length == 0 && headerNames.length == 0) {
    log(Level.Warn, "filter-as: no rules configured, every event passes");
  }
  return Verdict.Ok;
});

function dropped(ev: Event): bool {
  if (exactTypes.has(ev.type)) return true;
  for (let i = 0; i < typePrefixes.length; i++) {
    if (ev.type.startsWith(typePrefixes[i])) return true;
  }
  for (let i = 0; i < headerNames.length; i++) {
    const v = ev.header(headerNames[i]);
    if (v === null) continue;
    const want = headerValues[i];
    if (want === null || v == want) return true;
  }
  return false;
}

onEvent((ev: Event): Verdict => {
  if (dropped(ev)) return Verdict.Ok; // no output: the event is dropped
  if (forward() < 0) return retry("filter-as: output refused");
  return Verdict.Ok;
});
