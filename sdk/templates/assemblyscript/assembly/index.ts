// __NAME__ sends each event on along its type's route with the header
// "greeting" set (replacing one the event has), and filters out events whose type ends in ".noise".
import {
  Event, Header, Output, Verdict, emit, getConfig, onEvent, reject,
} from "@switchyard-router/sdk-assemblyscript/assembly";

// The module's exports come from the SDK:
export { sy_abi_version, sy_init, sy_handle } from "@switchyard-router/sdk-assemblyscript/assembly";

onEvent((ev: Event): Verdict => {
  if (ev.type.endsWith(".noise")) return Verdict.Ok; // no output: filtered
  const config = getConfig();
  const greeting = config.has("greeting") && config.get("greeting").length > 0 ? config.get("greeting") : "hello";
  // headers, when set, replace the input's: copy them but a "greeting" the
  // event has (a name given twice is refused), and set it
  const headers = new Array<Header>();
  for (let i = 0; i < ev.headers.length; i++) {
    if (ev.headers[i].name != "greeting") headers.push(ev.headers[i]);
  }
  headers.push(new Header("greeting", greeting));
  // "" = the type's route; key and data inherited
  if (emit(Output.to("").withHeaders(headers)) < 0) return reject("__NAME__: output refused");
  return Verdict.Ok;
});
