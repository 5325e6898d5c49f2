// The Switchyard operator console: plain JavaScript, no library, no build
// step. Every page reads the admin API with the bearer token kept in this
// tab's session storage (never a cookie: a request another site makes
// carries no credentials). Data is put in the page as text, never as HTML.
'use strict';

const S = { token: sessionStorage.getItem('sy-token') || '', timers: [], stream: null, page: 0, flash: null };

// every starts a page's refresh timer, unless the page was left while it
// loaded (route() counts pages). Start it before the first refresh: a page
// whose first load failed (the router restarting) tries again, and a
// refresh that succeeds takes the error away.
function every(ms, fn) {
  const page = S.page;
  // A refresh still running when the page is left settles on the next
  // page: it must neither clear nor set that page's error (a review).
  const settle = (ok) => (e) => { if (!left(page)) (ok ? clearError() : showError(e)); };
  return () => { if (page === S.page) S.timers.push(setInterval(() => fn().then(settle(true), settle(false)), ms)); };
}

// left says whether the page that started at page (S.page then) was left
// for another: a page that awaits before drawing must not draw over the
// next one (it did: DLQ, then Event, showed the DLQ under "Event").
function left(page) { return page !== S.page; }

// h builds an element: h('td', {class: 'num'}, 'text', child, ...). Text
// goes in as text, with its direction controls shown (visible).
function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : visible(String(c)));
  }
  return e;
}

// visible shows the characters that reorder or hide the text around them
// (bidirectional overrides and isolates, directional marks, zero-width
// ones) as ⟨U+XXXX⟩: an id with U+202E read as another (a console trial).
// Attributes and links keep the text as it is.
function visible(s) {
  return s.replace(/[\u061C\u200B-\u200F\u202A-\u202E\u2060-\u2069\uFEFF]/g, (c) => `⟨U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`);
}

const main = () => document.getElementById('main');

// api calls the router; a non-2xx answer throws its problem detail (with
// okStatus, those statuses are answers too).
async function api(method, path, body, okStatus = []) {
  const headers = { Accept: 'application/json' };
  if (S.token) headers.Authorization = 'Bearer ' + S.token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, {
    method, headers, credentials: 'omit', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (!r.ok && !okStatus.includes(r.status)) {
    const err = new Error((data && (data.detail || data.title)) || `${r.status} ${r.statusText}`);
    err.status = r.status;
    throw err;
  }
  return data;
}

function showError(err) {
  if (err && (err.status === 401 || err.status === 403)) return showLogin(err.message);
  let box = document.getElementById('error');
  if (!box) {
    box = h('p', { id: 'error', class: 'error' });
    main().prepend(box);
  }
  box.textContent = String((err && err.message) || err);
}

function clearError() {
  const box = document.getElementById('error');
  if (box) box.remove();
}

function showLogin(why) {
  stopAll();
  sessionStorage.removeItem('sy-token');
  S.token = '';
  main().replaceChildren(document.getElementById('login').content.cloneNode(true));
  if (why) main().prepend(h('p', { class: 'error' }, why));
  document.getElementById('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    S.token = document.getElementById('token').value.trim();
    sessionStorage.setItem('sy-token', S.token);
    route();
  });
}

function stopAll() {
  S.timers.forEach(clearInterval);
  S.timers = [];
  if (S.stream) S.stream.abort();
  S.stream = null;
}

// ---- formatting

function age(seconds) {
  if (!seconds) return '—';
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}
function bytes(n) {
  if (!n) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}
function when(t) { return t ? new Date(t).toLocaleString() : '—'; }
function position(p) {
  if (!p) return '—';
  if (p.stream) return `stream ${p.stream} #${p.sequence}`;
  if (p.topic) return `${p.topic}/${p.partition || 0}@${p.offset || 0}`;
  return '—';
}
function stateCell(state) { return h('td', { class: 'state ' + ({ delivered: 'ok', filtered: 'muted', dlq: 'bad', pending: 'warn' }[state] || '') }, state); }
// eventLink leads to a stored event's page, looked up in its tenant's
// events (?tenant=, which admins may name): always named, since without
// it the API reads the caller's own tenant, which an admin token's need not
// be. An inbox's record (queue inbox:<name>) has no such page: its id is
// shown as it is.
function eventLink(id, tenant, queue) {
  if ((queue || '').startsWith('inbox:')) return h('code', {}, id);
  const q = new URLSearchParams({ id });
  if (tenant) q.set('tenant', tenant);
  return h('a', { href: '#/event?' + q }, id);
}
function tenantQuery(tenant) { return tenant ? '&tenant=' + encodeURIComponent(tenant) : ''; }
function table(head, rows, attrs) {
  return h('table', attrs, h('thead', {}, h('tr', {}, head.map((c) => h('th', { class: /^(pending|in process|DLQ|resolved|attempts|ok|filtered|retry|reject|outputs|count|p50|p90|p99|leased)$/.test(c) ? 'num' : null }, c)))),
    h('tbody', {}, rows));
}

// ---- charts: inline SVG, no library

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  e.append(...children);
  return e;
}

// rateChart draws a queue's events in (blue) and out (green) per second,
// one point per 10 s, over the router's window; its text says the latest.
function rateChart(hist, queue) {
  const ins = (hist && hist.rates.in && hist.rates.in[queue]) || [];
  const outs = (hist && hist.rates.out && hist.rates.out[queue]) || [];
  const n = Math.max(ins.length, outs.length);
  const last = (xs) => (xs.length ? xs[xs.length - 1] : 0);
  const label = h('span', { class: 'rate' }, `${rate(last(ins))} in · ${rate(last(outs))} out`);
  if (n < 2) return h('span', { class: 'chart' }, label);
  const W = 150, H = 28, top = Math.max(1, ...ins, ...outs);
  const line = (xs, cls) => svg('polyline', { class: cls, fill: 'none', points: xs.map((v, i) => `${(i * W / (n - 1)).toFixed(1)},${(H - 1 - v * (H - 2) / top).toFixed(1)}`).join(' ') });
  const chart = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img' },
    svg('title', {}, `peak ${rate(top)} over the last ${Math.round((hist.window_seconds || 0) / 60)} min`), line(ins, 'in'), line(outs, 'out'));
  return h('span', { class: 'chart' }, chart, label);
}
function rate(v) { return v >= 100 ? `${Math.round(v)}/s` : `${+v.toFixed(1)}/s`; }
function ms(s) { return s ? (s < 0.001 ? `${(s * 1e6).toFixed(0)} µs` : `${(s * 1000).toFixed(s < 0.01 ? 2 : 1)} ms`) : '—'; }

// latencyTable is the fsync and publish percentiles over the window.
function latencyTable(hist) {
  if (!hist || !hist.latency) return h('p', { class: 'muted' }, 'Not kept.');
  const rows = [];
  for (const [what, label] of [['fsync', 'fsync (commit)'], ['publish', 'publish']]) {
    for (const [key, q] of Object.entries(hist.latency[what] || {}).sort()) {
      rows.push(h('tr', { 'data-latency': what + (key ? ':' + key : '') }, h('td', {}, key ? `${label} ${key}` : label),
        h('td', { class: 'num' }, q.count), h('td', { class: 'num' }, ms(q.p50)), h('td', { class: 'num' }, ms(q.p90)), h('td', { class: 'num' }, ms(q.p99))));
    }
  }
  return h('div', {}, table(['', 'count', 'p50', 'p90', 'p99'], rows.length ? rows : [h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'Nothing yet.'))]),
    h('p', { class: 'muted' }, `over the last ${age(hist.window_seconds)}`));
}

// ---- overview

async function overview() {
  const typesBody = h('tbody', { id: 'types' });
  const sinks = h('div', { id: 'sinks' });
  const storage = h('div', { id: 'storage' });
  const latency = h('div', { id: 'latency' });
  let hist = null, histAt = 0;
  const updated = h('span', { class: 'muted', id: 'updated' });
  main().replaceChildren(
    h('div', { class: 'bar' }, h('h2', {}, 'Event types and inboxes'), updated),
    h('table', { id: 'types-table' },
      h('thead', {}, h('tr', {}, ['type', 'pending', 'in process', 'oldest pending', 'poll delay', 'DLQ', 'resolved', 'in / out, last 15 min'].map((c, i) => h('th', { class: i && i < 7 ? 'num' : null }, c)))),
      typesBody),
    h('div', { class: 'grid' },
      h('section', { class: 'card' }, h('h2', {}, 'Sinks'), sinks),
      h('section', { class: 'card' }, h('h2', {}, 'Latency'), latency),
      h('section', { class: 'card' }, h('h2', {}, 'Storage'), storage)));
  const refresh = async () => {
    const [stats, dlq, ready] = await Promise.all([api('GET', '/v1/stats'), api('GET', '/v1/dlq/stats'), api('GET', '/readyz', undefined, [503])]);
    if (Date.now() - histAt > 5000) { hist = await api('GET', '/v1/stats/history'); histAt = Date.now(); }
    const rows = new Map();
    for (const t of stats.types || []) rows.set(t.type, { ...t });
    for (const d of dlq.types || []) rows.set(d.type, { ...(rows.get(d.type) || { type: d.type }), dlq: d.dlq, resolved: d.resolved });
    const sorted = [...rows.values()].sort((a, b) => a.type.localeCompare(b.type));
    typesBody.replaceChildren(...(sorted.length ? sorted.map((t) => h('tr', { 'data-type': t.type },
      h('td', {}, t.type),
      h('td', { class: 'num', 'data-col': 'pending' }, t.pending || 0),
      h('td', { class: 'num', 'data-col': 'in_process' }, t.in_process || 0),
      h('td', { class: 'num' }, age(t.oldest_pending_age_seconds)),
      h('td', { class: 'num' }, age(t.poll_delay_seconds)),
      h('td', { class: 'num ' + (t.dlq ? 'bad' : ''), 'data-col': 'dlq' }, t.dlq || 0),
      h('td', { class: 'num' }, t.resolved || 0),
      h('td', { 'data-col': 'rates' }, rateChart(hist, t.type)))) : [h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No event types yet.'))]));
    latency.replaceChildren(latencyTable(hist));
    const sinkNames = Object.keys(ready.sinks || {}).sort();
    const lastErr = stats.sinks || {};
    sinks.replaceChildren(sinkNames.length ? table(['sink', 'state', 'last publish error'], sinkNames.map((n) => h('tr', { 'data-sink': n },
      h('td', {}, n), h('td', { class: ready.sinks[n] === 'ok' ? 'ok' : 'bad' }, ready.sinks[n] === 'ok' ? 'connected' : ready.sinks[n]),
      h('td', { class: 'error', 'data-col': 'last-error' }, lastErr[n] ? `${when(lastErr[n].last_error_at)} (${lastErr[n].type}): ${lastErr[n].last_error}` : '—')))) : h('p', { class: 'muted' }, 'No sinks.'));
    const st = stats.storage;
    storage.replaceChildren(st ? table(['', ''], [
      h('tr', {}, h('td', {}, 'pages in use'), h('td', {}, bytes(st.used_bytes))),
      h('tr', {}, h('td', {}, 'data file'), h('td', {}, bytes(st.file_bytes))),
      h('tr', {}, h('td', {}, 'limit (storage.max_size)'), h('td', {}, st.max_size_bytes ? bytes(st.max_size_bytes) : 'none')),
      h('tr', {}, h('td', {}, 'free on the disk'), h('td', {}, bytes(st.disk_free_bytes))),
      h('tr', {}, h('td', {}, 'ready'), h('td', { class: ready.ready ? 'ok' : 'bad' }, ready.ready ? 'yes' : JSON.stringify(ready.checks))),
    ]) : h('p', { class: 'muted' }, 'Not measured.'));
    updated.textContent = 'updated ' + new Date().toLocaleTimeString();
  };
  every(2000, refresh)();
  await refresh();
}

// ---- one event

async function eventPage(params) {
  const input = h('input', { id: 'lookup', size: 44, placeholder: 'event id or idempotency key', value: params.get('id') || params.get('key') || '' });
  const tenantInput = h('input', { id: 'lookup-tenant', size: 12, placeholder: 'your own', title: 'tenant (admins may name any; empty: the tenant of your token)', value: params.get('tenant') || '' });
  const out = h('div', { id: 'event-out' });
  const go = (kind) => (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ [kind]: input.value.trim() });
    if (tenantInput.value.trim()) q.set('tenant', tenantInput.value.trim());
    location.hash = '#/event?' + q;
  };
  main().replaceChildren(
    h('form', { class: 'bar', onsubmit: go('id') }, input, 'tenant', tenantInput,
      h('button', { class: 'primary', id: 'by-id', onclick: go('id') }, 'Find by id'),
      h('button', { id: 'by-key', onclick: go('key') }, 'Find by idempotency key')),
    out);
  const tq = tenantQuery(params.get('tenant'));
  if (params.get('id')) {
    out.replaceChildren(renderEvent(await api('GET', `/v1/events/${encodeURIComponent(params.get('id'))}?include=history,event${tq}`)));
  } else if (params.get('key')) {
    const list = await api('GET', `/v1/events?idempotency_key=${encodeURIComponent(params.get('key'))}${tq}`);
    const full = await Promise.all(list.events.map((e) => api('GET', `/v1/events/${encodeURIComponent(e.id)}?include=history,event${tq}`)));
    out.replaceChildren(h('p', { class: 'muted' }, `${full.length} event(s) stored under idempotency key “${params.get('key')}”`), ...full.map(renderEvent));
  }
}

function renderEvent(v) {
  const ev = v.event || {};
  const attrs = Object.keys(ev).filter((k) => k !== 'data' && k !== 'data_base64').sort();
  let data = '(no data)';
  if ('data' in ev) data = typeof ev.data === 'string' ? ev.data : JSON.stringify(ev.data, null, 2);
  else if ('data_base64' in ev) data = `base64: ${ev.data_base64}`;
  return h('section', { class: 'card', 'data-event': v.id },
    h('h2', {}, 'Event ', h('code', {}, v.id)),
    table(['tenant', 'state', 'attempts', 'created', 'next attempt', 'last error'], [h('tr', {},
      h('td', { 'data-col': 'tenant' }, v.tenant || '—'), stateCell(v.state), h('td', { class: 'num' }, v.attempts), h('td', {}, when(v.created_at)),
      h('td', {}, when(v.next_attempt_at)), h('td', { class: 'error' }, v.last_error || ''))]),
    h('h2', {}, 'Outputs'),
    (v.outputs || []).length ? table(['destination', 'delivered', 'at', 'position', 'last error'], v.outputs.map((o) => h('tr', {},
      h('td', {}, o.destination), h('td', { class: o.delivered ? 'ok' : o.abandoned ? 'muted' : 'warn' }, o.delivered ? 'yes' : o.abandoned ? 'abandoned' : 'no'),
      h('td', {}, when(o.delivered_at)), h('td', {}, position(o.position)), h('td', { class: 'error' }, o.last_error || '')))) : h('p', { class: 'muted' }, 'None yet.'),
    h('h2', {}, 'Attempts'),
    (v.history || []).length ? table(['at', 'error'], v.history.map((a) => h('tr', {}, h('td', {}, when(a.at)), h('td', { class: 'error' }, a.error)))) : h('p', { class: 'muted' }, 'No failed attempt.'),
    h('h2', {}, 'Attributes'),
    table(['attribute', 'value'], attrs.map((k) => h('tr', {}, h('td', {}, h('code', {}, k)), h('td', {}, String(ev[k]))))),
    h('h2', {}, 'Data'), h('pre', { class: 'data' }, data));
}

// ---- DLQ

async function dlqPage(params) {
  const at = S.page;
  const stats = await api('GET', '/v1/dlq/stats');
  if (left(at)) return;
  const type = h('select', { id: 'dlq-type' }, h('option', { value: '' }, 'every type'),
    (stats.types || []).map((t) => h('option', { value: t.type, selected: params.get('type') === t.type }, `${t.type} (${t.dlq} dead, ${t.resolved} resolved)`)));
  const status = h('select', { id: 'dlq-status' }, ['dlq', 'resolved'].map((s) => h('option', { value: s, selected: params.get('status') === s }, s)));
  const since = h('input', { id: 'dlq-since', size: 6, placeholder: 'e.g. 1h', value: params.get('since') || '' });
  const filter = () => { const q = new URLSearchParams(); if (type.value) q.set('type', type.value); q.set('status', status.value); if (since.value) q.set('since', since.value); return q; };
  const apply = (ev) => { ev.preventDefault(); location.hash = '#/dlq?' + filter(); };
  const confirmBar = h('div', { id: 'dlq-confirm' });
  // The result of an action, through the redraw it asked for (route()).
  const result = h('p', { id: 'dlq-result', class: 'muted' }, S.flash && S.flash.page === at ? S.flash.text : '');
  S.flash = null;
  const more = h('p', { id: 'dlq-more', class: 'muted' });
  const body = h('tbody', { id: 'dlq-rows' });
  const dead = status.value === 'dlq';
  main().replaceChildren(
    h('form', { class: 'bar', onsubmit: apply }, type, status, 'since', since, h('button', {}, 'Filter')),
    h('div', { class: 'bar' },
      // Resolved ones can be retried too (the resolved list offered no
      // retry: a console trial).
      h('button', { id: 'retry-selected', onclick: () => ask('retry', selected()) }, 'Retry selected'),
      dead ? h('button', { id: 'resolve-selected', onclick: () => ask('resolve', selected()) }, 'Resolve selected') : null,
      h('button', { id: 'delete-selected', class: 'danger', onclick: () => ask('delete', selected()) }, 'Delete selected'),
      h('span', { class: 'muted' }, '·'),
      h('button', { id: 'retry-all', onclick: () => askAll('retry') }, 'Retry all matching'),
      dead ? h('button', { id: 'resolve-all', onclick: () => askAll('resolve') }, 'Resolve all matching') : null),
    confirmBar, result,
    table(['', 'id', 'tenant', 'type', 'source', 'attempts', 'reason', dead ? 'moved' : 'resolved', ''], [], { id: 'dlq-table' }),
    more);
  document.querySelector('#dlq-table tbody').replaceWith(body);
  const q = filter();
  const cursor = params.get('cursor') || '';
  const limit = Math.min(Math.max(parseInt(params.get('limit'), 10) || 200, 1), 500);
  const sized = limit === 200 ? '' : '&limit=' + limit;
  const page = await api('GET', '/v1/dlq?' + q + '&limit=' + limit + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
  if (left(at)) return;
  const items = page.items || [];
  const retry = (ev) => ask('retry', [letterOf(ev.target)]);
  body.replaceChildren(...(items.length ? items.map((d) => dlqRow(d, dead, retry)) : [h('tr', {}, h('td', { colspan: 9, class: 'muted' }, 'Nothing here.'))]));
  more.replaceChildren(...dlqPages(q + sized, cursor, page.next_cursor, limit));

  function letterOf(el) { const { id, tenant, queue, source } = el.closest('tr').dataset; return { id, tenant, queue, source }; }
  function selected() { return [...body.querySelectorAll('input:checked')].map(letterOf); }
  async function countAll() {
    let n = 0, cursor = '';
    for (let pages = 0; pages < 50; pages++) {
      const p = await api('GET', '/v1/dlq?' + q + '&limit=500' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
      n += (p.items || []).length;
      if (!p.next_cursor) return n;
      cursor = p.next_cursor;
    }
    return n + '+';
  }
  async function askAll(action) {
    const n = await countAll();
    confirmAction(action, `${action} all ${n} dead letter(s) matching ${q.get('type') || 'every type'}${q.get('since') ? ' since ' + q.get('since') : ''}?`,
      { type: q.get('type') || undefined, since: q.get('since') || undefined, status: q.get('status'), all: !q.get('type') && !q.get('since') });
  }
  // ask confirms an action on chosen dead letters: one request per tenant,
  // inbox and source, since a body's ids are one tenant's (tenants choose
  // their ids independently), an inbox's are named with its queue as type,
  // and with their source (without it, an id would name every source's).
  function ask(action, chosen) {
    if (!chosen.length) { result.textContent = 'Select at least one.'; return; }
    const bodies = new Map();
    for (const c of chosen) {
      const k = c.tenant + '\n' + c.queue + '\n' + c.source;
      if (!bodies.has(k)) bodies.set(k, { ids: [], tenant: c.tenant || undefined, type: c.queue || undefined, source: c.source || undefined, status: q.get('status') });
      bodies.get(k).ids.push(c.id);
    }
    confirmAction(action, `${action} ${chosen.length} dead letter(s)?`, ...bodies.values());
  }
  function confirmAction(action, question, ...filterBodies) {
    confirmBar.replaceChildren(h('div', { class: 'confirm bar' }, h('span', { id: 'confirm-question' }, question.charAt(0).toUpperCase() + question.slice(1)),
      h('button', { class: 'primary', id: 'confirm-yes', onclick: async () => {
        const page = S.page; // the list the action was asked on
        confirmBar.replaceChildren();
        // Each request is one tenant's, inbox's or source's: one that
        // fails does not undo those done, so the result names both.
        const r = { done: 0, matched: 0, skipped: [], not_found: [], failed: [] };
        for (const body of filterBodies) {
          try {
            const one = await api('POST', `/v1/dlq/${action}`, body);
            r.done += one.done; r.matched += one.matched;
            r.skipped.push(...(one.skipped || [])); r.not_found.push(...(one.not_found || []));
          } catch (e) {
            if (e.status === 401 || e.status === 403) {
              // Signed out: the sign-in page says what was done before.
              if (r.matched) e.message += ` (before it, ${action}: ${r.done} of ${r.matched} done)`;
              return showError(e);
            }
            r.failed.push(`${(body.ids || []).length || 'all matching'} of ${body.tenant || 'the default tenant'}${body.type ? ' (' + body.type + ')' : ''}: ${e.message}`);
          }
        }
        // Which were skipped and why, and which were not found, the first
        // ten of each: it said only how many (a console trial).
        const few = (list, f) => list.slice(0, 10).map(f).join('; ') + (list.length > 10 ? `; ${list.length - 10} more` : '');
        const text = `${action}: ${r.done} of ${r.matched} done` +
          (r.skipped.length ? `, ${r.skipped.length} skipped (${few(r.skipped, (s) => `${visible(s.id)}: ${s.code}: ${s.reason}`)})` : '') +
          (r.not_found.length ? `, ${r.not_found.length} not found (${few(r.not_found, visible)})` : '') +
          (r.failed.length ? `; ${r.failed.length} request(s) failed: ${r.failed.join('; ')}` : '');
        result.textContent = text;
        // Show the list as the action left it, with its result, unless the
        // user has gone on to another page meanwhile, even while the
        // requests ran (drawn again, it would lose what they did there, a
        // row checked, say).
        if (page === S.page) { S.flash = { text, page: page + 1 }; route(); }
      } }, 'Confirm'),
      h('button', { id: 'confirm-no', onclick: () => confirmBar.replaceChildren() }, 'Cancel')));
  }
}

// dlqRow is one dead letter's row. It names the dead letter as the bulk
// routes take it: id, tenant and, for an inbox's, its queue and the
// event's source (two sources may send an inbox the same id), read back by
// the page's selected(). retry, on the DLQ's list, retries the row's.
function dlqRow(d, dead, retry) {
  return h('tr', { 'data-id': d.id, 'data-tenant': d.tenant || '', 'data-queue': d.queue || '', 'data-source': d.queue ? d.source : '' },
    h('td', {}, h('input', { type: 'checkbox' })), h('td', {}, eventLink(d.id, d.tenant, d.queue)), h('td', { 'data-col': 'tenant' }, d.tenant || '—'), h('td', {}, d.type),
    h('td', { 'data-col': 'source' }, d.source || '—'),
    h('td', { class: 'num' }, d.attempts), h('td', { class: 'error' }, d.reason), h('td', {}, when(dead ? d.moved_at : d.resolved_at)),
    h('td', {}, retry ? h('button', { class: 'row-retry', onclick: retry }, 'Retry') : null));
}

// dlqPages links the DLQ's newest page and the next older one (the newest
// come first): q is the list's query, cursor this page's, next the older's.
function dlqPages(q, cursor, next, limit) {
  return [
    cursor ? h('a', { id: 'dlq-newest', href: '#/dlq?' + q }, 'newest') : null,
    cursor && next ? ' · ' : null,
    next ? h('a', { id: 'dlq-older', href: '#/dlq?' + q + '&cursor=' + encodeURIComponent(next) }, `older ${limit} →`) : null,
  ].filter((x) => x !== null);
}

// ---- plugins

async function pluginsPage() {
  const body = h('div', { id: 'plugins' });
  const updated = h('span', { class: 'muted', id: 'updated' });
  main().replaceChildren(h('div', { class: 'bar' }, h('h2', {}, 'Plugins'), updated), body);
  const refresh = async () => {
    const { plugins } = await api('GET', '/v1/plugins');
    body.replaceChildren(...(plugins.length ? plugins.map(renderPlugin) : [h('p', { class: 'muted' }, 'No plugin is loaded.')]));
    updated.textContent = 'updated ' + new Date().toLocaleTimeString();
  };
  every(5000, refresh)();
  await refresh();
}

function renderPlugin(p) {
  const v = p.verdicts || {};
  const q = p.latency || {};
  return h('section', { class: 'card', 'data-plugin': p.name },
    h('h2', {}, 'Plugin ', h('code', {}, p.name)),
    table(['module', 'sha256', 'loaded', 'used by'], [h('tr', {},
      h('td', {}, h('code', {}, p.file || '—')), h('td', { class: 'hash', title: p.sha256 || '' }, (p.sha256 || '—').slice(0, 16)),
      h('td', {}, when(p.loaded_at)), h('td', {}, (p.used_by || []).join(', ') || '—'))]),
    table(['ok', 'filtered', 'retry', 'reject', 'outputs', 'p50', 'p90', 'p99'], [h('tr', {},
      h('td', { class: 'num', 'data-col': 'ok' }, v.ok || 0), h('td', { class: 'num', 'data-col': 'filtered' }, v.filtered || 0),
      h('td', { class: 'num ' + (v.retry ? 'warn' : ''), 'data-col': 'retry' }, v.retry || 0), h('td', { class: 'num ' + (v.reject ? 'bad' : ''), 'data-col': 'reject' }, v.reject || 0),
      h('td', { class: 'num' }, p.outputs || 0), h('td', { class: 'num' }, ms(q.p50)), h('td', { class: 'num' }, ms(q.p90)), h('td', { class: 'num' }, ms(q.p99)))]),
    h('p', { class: 'muted', 'data-col': 'failure-kinds' }, 'Failures without a verdict: ' +
      (Object.entries(p.failure_kinds || {}).map(([k, n]) => `${k} ${n}`).join(', ') || 'none')),
    p.shared_id_events && p.shared_id_last ? h('p', { class: 'warn', 'data-col': 'shared-ids' },
      `${p.shared_id_events} event(s) had outputs sent the same way with one id. Last: `, eventLink(p.shared_id_last.event_id, p.shared_id_last.tenant, p.shared_id_last.type), ' — ' + p.shared_id_last.problem) : null,
    h('h2', {}, 'Last failures'),
    (p.failures || []).length ? table(['at', 'type', 'event', 'tenant', 'verdict', 'reason'], p.failures.map((f) => h('tr', { 'data-failure': f.event_id },
      h('td', {}, when(f.at)), h('td', {}, f.type), h('td', {}, eventLink(f.event_id, f.tenant, f.type)), h('td', { 'data-col': 'tenant' }, f.tenant || '—'), h('td', { class: f.verdict === 'reject' ? 'bad' : 'warn' }, f.verdict),
      h('td', { class: 'error' }, f.reason)))) : h('p', { class: 'muted' }, 'None since the router started.'));
}

// ---- inboxes

async function inboxPage(params) {
  // Whether each inbox consumes is /readyz's detail: the page shows the
  // rest without it ("—") if it fails.
  const page = S.page;
  const [{ inboxes }, stats, ready] = await Promise.all([api('GET', '/v1/inboxes'), api('GET', '/v1/stats'),
    api('GET', '/readyz', undefined, [503]).catch(() => ({}))]);
  if (left(page)) return;
  const consumes = (ready && ready.inboxes) || {};
  const byQueue = new Map((stats.types || []).map((t) => [t.type, t]));
  const chosen = params.get('name') || (inboxes[0] && inboxes[0].name) || '';
  const audit = h('div', { id: 'dedup' });
  const claims = h('div', { id: 'claims' });
  main().replaceChildren(
    h('h2', {}, 'Inboxes'),
    inboxes.length ? table(['inbox', 'from', 'reads', 'consuming', 'delivery', 'pending', 'in process', 'leased', 'DLQ'], inboxes.map((i) => {
      const q = byQueue.get(i.queue) || {};
      return h('tr', { 'data-inbox': i.name, class: i.name === chosen ? 'chosen' : null },
        h('td', {}, h('a', { href: '#/inbox?name=' + encodeURIComponent(i.name) }, i.name)), h('td', {}, i.from), h('td', { 'data-col': 'reads' }, h('code', {}, i.reads)),
        h('td', { 'data-col': 'consuming', class: consumes[i.name] === 'ok' ? 'ok' : 'bad' }, consumes[i.name] === 'ok' ? 'yes' : (consumes[i.name] || '—')),
        h('td', { 'data-col': 'mode' }, i.mode === 'pull' ? 'pull subscription' : `push to ${i.deliver}`),
        h('td', { class: 'num', 'data-col': 'pending' }, q.pending || 0), h('td', { class: 'num' }, q.in_process || 0),
        h('td', { class: 'num', 'data-col': 'leased' }, i.mode === 'pull' ? i.leased : '—'), h('td', { class: 'num ' + (q.dlq ? 'bad' : '') }, q.dlq || 0));
    })) : h('p', { class: 'muted' }, 'No inbox is configured.'),
    h('h2', {}, 'Dropped redeliveries', chosen ? [' of ', h('code', {}, chosen)] : ''), audit,
    h('h2', {}, 'Claims (the dedup arbiter)'), claims);
  if (chosen) {
    const { skipped } = await api('GET', `/v1/inbox/${encodeURIComponent(chosen)}/dedup?limit=200`);
    audit.replaceChildren(skipped.length ? table(['dropped at', 'id', 'reason', 'this copy from', 'first copy from', 'first at'], skipped.map((k) => h('tr', { 'data-skip': k.id },
      h('td', {}, when(k.at)), h('td', {}, h('code', {}, k.id)), h('td', {}, k.reason), h('td', {}, k.origin),
      h('td', {}, k.first_origin || '—'), h('td', {}, when(k.first_at))))) : h('p', { class: 'muted' }, 'None.'));
  }
  const c = await api('GET', '/v1/claims?limit=200');
  claims.replaceChildren(c.claims.length ? table(['consumer', 'tenant', 'id', 'state', 'mode', 'claimed', 'lease until', 'expires'], c.claims.map((k) => h('tr', { 'data-claim': k.id },
    h('td', {}, k.consumer), h('td', {}, k.tenant || '—'), h('td', {}, h('code', {}, k.id)), h('td', { class: k.state === 'completed' ? 'ok' : 'warn' }, k.state),
    h('td', {}, k.mode), h('td', {}, when(k.claimed_at)), h('td', {}, when(k.lease_until)), h('td', {}, when(k.expires_at))))) : h('p', { class: 'muted' }, 'No claim is held.'));
}

// ---- live tail

async function tailPage(params) {
  const type = h('input', { id: 'tail-type', placeholder: 'every type', value: params.get('type') || '' });
  const rows = h('tbody', { id: 'tail-rows' });
  const state = h('span', { id: 'tail-state', class: 'muted' }, 'connecting…');
  main().replaceChildren(
    h('form', { class: 'bar', onsubmit: (ev) => { ev.preventDefault(); location.hash = '#/tail' + (type.value ? '?type=' + encodeURIComponent(type.value) : ''); } },
      'Outputs as the broker acknowledges them, newest first. Type:', type, h('button', {}, 'Watch'), state),
    table(['time', 'type', 'event', 'tenant', 'destination', 'position'], [], { id: 'tail-table' }));
  document.querySelector('#tail-table tbody').replaceWith(rows);
  // A stream the router ends (a restart) or loses is opened again, after
  // 1, 2, 4, 8, then 15 s, while the page is shown: it said "the router
  // ended the stream" and stopped (a console trial).
  const at = S.page;
  for (let tries = 0; !left(at);) {
    const ctrl = new AbortController();
    S.stream = ctrl;
    let why = 'the router ended the stream';
    try {
      await tailOnce(type.value, rows, state, () => { tries = 0; });
    } catch (e) {
      if (ctrl.signal.aborted || left(at)) return;
      if (e.status === 401 || e.status === 403) throw e;
      why = `the stream was lost (${e.message})`;
    }
    if (left(at)) return;
    const wait = Math.min(1000 * 2 ** tries++, 15000);
    state.textContent = `${why}: connecting again in ${wait / 1000} s…`;
    await new Promise((res) => setTimeout(res, wait));
  }
}

// tailOnce reads one stream of the live tail into rows until it ends;
// watching is called once it is open.
async function tailOnce(type, rows, state, watching) {
  const headers = { Accept: 'text/event-stream' };
  if (S.token) headers.Authorization = 'Bearer ' + S.token;
  const r = await fetch('/v1/tail' + (type ? '?type=' + encodeURIComponent(type) : ''), { headers, credentials: 'omit', signal: S.stream.signal });
  if (!r.ok) { const e = new Error(`tail: ${r.status} ${r.statusText}`); e.status = r.status; throw e; }
  state.textContent = 'watching';
  watching();
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    for (let i; (i = buf.indexOf('\n\n')) >= 0;) {
      const chunk = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let event = '', data = '';
      for (const line of chunk.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      if (event === 'published') {
        const p = JSON.parse(data);
        rows.prepend(h('tr', { 'data-id': p.event.id }, h('td', {}, new Date(p.at).toLocaleTimeString()), h('td', {}, p.type),
          h('td', {}, eventLink(p.event_id || p.event.id, p.tenant, p.type)), h('td', { 'data-col': 'tenant' }, p.tenant || '—'),
          h('td', {}, p.destination), h('td', {}, position(p.position))));
        while (rows.children.length > 200) rows.lastChild.remove();
      } else if (event === 'dropped') {
        state.textContent = `watching (fell behind: ${JSON.parse(data).dropped} skipped)`;
      }
    }
  }
}

// ---- routing

const pages = { '/': overview, '/event': eventPage, '/dlq': dlqPage, '/inbox': inboxPage, '/plugins': pluginsPage, '/tail': tailPage };

function route() {
  stopAll();
  S.page++;
  const [path, qs] = location.hash.replace(/^#/, '').split('?');
  const name = pages[path] ? path : '/';
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.getAttribute('href') === '#' + name);
  if (!S.token) return showLogin();
  main().replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
  const page = S.page;
  pages[name](new URLSearchParams(qs || '')).catch((e) => { if (!left(page)) showError(e); });
}

// takeLink trades a one-time token in the address (#token=, the link
// `router ui` printed) for this tab's session; false when the link is
// spent (the sign-in page says why). A link pasted into an open tab
// changes only the hash: the hash's every change comes here, not only the
// page's load (it stayed on the sign-in page: a console trial).
async function takeLink() {
  const m = location.hash.match(/[#&?]token=([^&]+)/);
  if (!m) return true;
  history.replaceState(null, '', location.pathname + '#/');
  const r = await fetch('/ui/session', { method: 'POST', headers: { Authorization: 'Bearer ' + decodeURIComponent(m[1]) }, credentials: 'omit' });
  if (!r.ok) {
    const why = r.status === 404 ? 'This router has no one-time links: sign in with an admin token.' : 'This link was used already or has expired: run router ui again.';
    // A tab signed in keeps its session, and says why the link did
    // nothing (a spent link signed it out: a review).
    if (S.token) {
      const conn = document.getElementById('conn');
      const was = conn.textContent;
      conn.textContent = why;
      setTimeout(() => { if (conn.textContent === why) conn.textContent = was; }, 10000);
      return true;
    }
    showLogin(why);
    return false;
  }
  S.token = (await r.json()).session;
  sessionStorage.setItem('sy-token', S.token);
  document.getElementById('conn').textContent = 'through router ui';
  return true;
}

// showAddress shows the page the address names, once any link in it is taken.
async function showAddress() {
  if (await takeLink()) route();
}

window.addEventListener('hashchange', showAddress);
showAddress();
