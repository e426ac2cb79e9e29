// toolsentry dashboard: read-only pages over the JSON API (/v1). No
// framework, no build step. Every value is put into the page as text
// (textContent), never as HTML.
'use strict';

const TOKEN_KEY = 'toolsentry.token';
const main = document.getElementById('main');
let leave = null; // stops what the current page runs (the live feed's stream)

// --- the API ---------------------------------------------------------------

class AuthError extends Error {}

function authHeaders() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: 'Bearer ' + t } : {};
}

async function api(path, opts = {}) {
  const resp = await fetch(path, { ...opts, headers: { Accept: 'application/json', ...authHeaders() } });
  if (resp.status === 401) {
    throw new AuthError('This server requires an API token (serve --http-token): enter it at the top right.');
  }
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    throw new Error(`${path}: ${resp.status} ${body.error || resp.statusText}`);
  }
  return body;
}

// A tool or composition id may hold '/': each segment is escaped.
function idPath(id) { return id.split('/').map(encodeURIComponent).join('/'); }
function toolHref(id) { return '#/tool/' + encodeURIComponent(id); }
function compositionHref(id) { return '#/composition/' + encodeURIComponent(id); }

// --- building the page -----------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function table(headers, rows, attrs) {
  return el('table', attrs,
    el('thead', null, el('tr', null, headers.map((h) => el('th', null, h)))),
    el('tbody', null, rows));
}

function badge(text, cls) { return el('span', { class: 'badge ' + (cls || text) }, text); }
function muted(text) { return el('span', { class: 'muted' }, text); }
function code(text) { return el('code', null, text); }
function short(fp) { return fp ? el('code', { title: fp }, fp.slice(0, 12)) : muted('none'); }
function when(t) { return t ? new Date(t).toLocaleString() : ''; }
function json(v) { return v === undefined ? '' : JSON.stringify(v); }
function list(items, f) { return items && items.length ? items.map(f).reduce((a, b) => [a, ', ', b]) : muted('none'); }

// A definition grid: label, value, label, value…
function kv(...pairs) {
  const out = [];
  for (let i = 0; i < pairs.length; i += 2) out.push(el('span', { class: 'muted' }, pairs[i]), el('div', null, pairs[i + 1]));
  return el('div', { class: 'kv' }, out);
}

function show(...children) {
  main.replaceChildren(...children.flat());
}

function showError(err) {
  show(el('p', { class: 'error', id: err instanceof AuthError ? 'auth-error' : 'error' }, err.message));
}

// A migration step as one line.
function stepText(s) {
  switch (s.op) {
    case 'move': return `move ${s.path} → ${s.to}`;
    case 'convert': return `convert ${s.path} to ${s.type}`;
    case 'map_enum': return `map ${s.path}: ` + Object.entries(s.mapping || {}).map(([a, b]) => `${a} → ${b}`).join(', ');
    case 'add_if_absent': return `add ${s.path} = ${json(s.value)} if absent`;
    default: return `${s.op} ${s.path}`;
  }
}

function migration(plan) {
  const steps = (plan && plan.steps) || [];
  const blocked = (plan && plan.blocked) || [];
  if (!steps.length && !blocked.length) return muted('nothing to migrate');
  return el('ul', { class: 'steps migration' },
    steps.map((s) => el('li', { class: 'step', title: s.reason }, stepText(s))),
    blocked.map((b) => el('li', { class: 'blocked', title: b.reason }, `blocked when ${b.path} is ${b.when}: ${b.reason}`)));
}

function directiveCell(d) {
  if (!d) return muted('none');
  return el('div', null, badge(d.action), ' ', d.directive,
    d.held ? [' ', badge('held')] : null,
    d.accepted_fingerprint ? [' ', badge('accepted', 'ok')] : null,
    d.superseded_by ? [' ', badge('superseded', 'muted')] : null);
}

// --- pages -----------------------------------------------------------------

async function fleetPage() {
  const { tools } = await api('/v1/tools');
  const drifted = tools.filter((t) => t.held || t.affected_agents.length);
  const details = new Map();
  await Promise.all(drifted.map(async (t) => {
    try { details.set(t.id, await api('/v1/tools/' + idPath(t.id))); } catch (e) { if (e instanceof AuthError) throw e; }
  }));
  const servers = new Map();
  for (const t of tools) {
    if (!servers.has(t.server)) servers.set(t.server, []);
    servers.get(t.server).push(t);
  }
  const held = tools.filter((t) => t.held).length;
  const out = [el('h1', null, 'Fleet'),
    el('p', { id: 'fleet-summary' }, `${tools.length} tools on ${servers.size} servers; ${held} held drifts.`)];
  if (!tools.length) out.push(el('p', { class: 'muted' }, 'No tools yet: serve records a tool at its first schema observation.'));
  for (const [server, ts] of [...servers].sort(([a], [b]) => a.localeCompare(b))) {
    out.push(el('h2', null, server || '(no server)'));
    out.push(table(['Tool', 'Baseline', 'Current', 'Drift', 'Affected agents', 'Migrations'], ts.map((t) => {
      const d = details.get(t.id);
      const migrations = d ? d.agents.filter((a) => a.directive && a.directive.action !== 'PROCEED' && !a.directive.superseded_by) : [];
      return el('tr', { class: t.held ? 'tool held' : 'tool', 'data-tool': t.id },
        el('td', null, el('a', { class: 'tool-link', href: toolHref(t.id) }, t.name || t.id)),
        el('td', null, short(t.baseline.fingerprint), ' ', muted('v' + t.baseline.version)),
        el('td', null, short(t.current.fingerprint), ' ', muted('v' + t.current.version)),
        el('td', null, t.held ? badge('held') : (t.baseline.fingerprint !== t.current.fingerprint ? badge('changed', 'warn') : muted('none'))),
        el('td', null, list(t.affected_agents, (a) => a)),
        el('td', null, migrations.length ? migrations.map((a) => el('div', { class: 'agent-migration' },
          el('strong', null, a.agent_id), ' ', badge(a.directive.action), migration(a.directive.migration))) : muted('none')));
    }), { class: 'fleet' }));
  }
  show(out);
}

async function toolPage(id) {
  const [t, verdicts] = await Promise.all([
    api('/v1/tools/' + idPath(id)),
    api('/v1/verdicts?limit=100&tool=' + encodeURIComponent(id)),
  ]);
  const out = [el('h1', null, 'Tool ', code(t.id)),
    kv(
      'server', t.server || muted('none'), 'name', t.name,
      'baseline', el('span', null, short(t.baseline.fingerprint), ' v', t.baseline.version),
      'current', el('span', null, short(t.current.fingerprint), ' v', t.current.version),
      'drift', t.held ? badge('held') : muted('not held'),
      'last observed', el('span', null, when(t.last_observed_time), ' ', muted('#' + t.last_observed_sequence)),
      'tool-wide directive', directiveCell(t.tool_directive))];

  out.push(el('h2', null, 'Versions'));
  out.push(table(['Version', 'Fingerprint', 'Stream sequence', 'Event', ''], t.versions.map((v) => el('tr', null,
    el('td', null, v.version), el('td', null, short(v.fingerprint)), el('td', null, v.sequence), el('td', null, code(v.event_id)),
    el('td', null, v.fingerprint === t.baseline.fingerprint ? badge('baseline', 'ok') : null, ' ',
      v.fingerprint === t.current.fingerprint ? badge('current', 'warn') : null)))));

  out.push(el('h2', null, 'Diff from baseline to current'));
  if (!t.changes.length) out.push(el('p', { class: 'muted' }, 'No change: the current version is the baseline.'));
  else {
    out.push(table(['Side', 'Kind', 'Path', 'Before → after', 'Breaking', 'Affects'], t.changes.map((c) => {
      const change = c.to ? `${c.path} → ${c.to}` : [c.before !== undefined ? json(c.before) : '∅', ' → ', c.after !== undefined ? json(c.after) : '∅'];
      return el('tr', { class: 'change', 'data-kind': c.kind },
        el('td', null, c.side), el('td', null, c.kind, c.keyword ? muted(' ' + c.keyword) : null), el('td', null, code(c.path || '(root)')),
        el('td', { class: 'mono' }, change), el('td', null, c.breaking ? badge('breaking') : muted('no')),
        el('td', null, list(c.affected_agents, (a) => a)));
    }), { class: 'diff' }));
  }

  out.push(el('h2', null, 'Agents'));
  if (!t.agents.length) out.push(el('p', { class: 'muted' }, 'No agent known to use it.'));
  else {
    out.push(table(['Agent', 'Sends', 'Reads', 'Affected', 'Directive', 'Migration'], t.agents.map((a) => el('tr', { class: 'agent', 'data-agent': a.agent_id },
      el('td', null, a.agent_id), el('td', null, list(a.input, code)), el('td', null, list(a.output, code)),
      el('td', null, list(a.affected, code)), el('td', null, directiveCell(a.directive)),
      el('td', null, a.directive ? migration(a.directive.migration) : muted('none')))), { class: 'agents' }));
  }

  out.push(el('h2', null, 'Verdict history'));
  out.push(verdictTable(verdicts.verdicts, false));
  if (verdicts.next_cursor) out.push(el('p', { class: 'muted' }, 'The 100 newest; the API pages further (GET /v1/verdicts?tool=…&cursor=…).'));
  show(out);
}

function verdictRow(v, key) {
  return el('tr', { class: 'verdict', 'data-sequence': v.sequence },
    el('td', null, when(v.time)), el('td', null, v.guard), el('td', null, badge(v.verdict, 'verdict')),
    key ? el('td', null, v.guard === 'schema' ? el('a', { href: toolHref(v.key) }, v.key) : el('a', { href: compositionHref(v.key) }, v.key)) : null,
    el('td', null, v.agent_id || ''), el('td', null, v.action ? badge(v.action) : ''), el('td', null, v.summary || ''));
}

function verdictTable(verdicts, key) {
  if (!verdicts.length) return el('p', { class: 'muted' }, 'No verdicts.');
  return table(['Time', 'Guard', 'Verdict', key ? 'Tool / composition' : null, 'Agent', 'Action', 'Summary'].filter((h) => h),
    verdicts.map((v) => verdictRow(v, key)), { class: 'verdicts' });
}

async function compositionsPage() {
  const { compositions } = await api('/v1/compositions');
  const out = [el('h1', null, 'Compositions')];
  if (!compositions.length) out.push(el('p', { class: 'muted' }, 'No compositions yet: declare one with an io.toolsentry.workflow.declared.v1 event.'));
  else {
    out.push(table(['Composition', 'Tools', 'Requirement', 'Composed quality', 'Last verdict', 'Observed runs'], compositions.map((c) => el('tr', null,
      el('td', null, el('a', { href: compositionHref(c.composition_id) }, c.composition_id), c.declared ? null : [' ', badge('undeclared', 'warn')]),
      el('td', null, list(c.tools, code)), el('td', null, pct(c.requirement)),
      el('td', null, pct(c.composed_quality)), el('td', null, c.verdict ? badge(c.verdict, 'verdict') : muted(c.pending || 'none')),
      el('td', null, c.observed ? `${c.observed.successes} / ${c.observed.runs}` : muted('none'))))));
  }
  show(out);
}

function pctText(x) { return x === null || x === undefined ? 'none' : (100 * x).toFixed(2) + '%'; }
function pct(x) { return x === null || x === undefined ? muted('none') : pctText(x); }

// A structure node: a tool id or {chain}, {parallel: {mode, of}}, {k_of_n: {k, of}}, {conditional: [{p, then}]}.
function structureNode(n) {
  if (typeof n === 'string') return el('li', null, code(n));
  if (!n || typeof n !== 'object') return el('li', null, json(n));
  const [kind, body] = Object.entries(n)[0] || ['?', null];
  switch (kind) {
    case 'chain': return el('li', null, 'chain', el('ul', { class: 'tree' }, (body || []).map(structureNode)));
    case 'parallel': return el('li', null, `parallel (${body.mode})`, el('ul', { class: 'tree' }, (body.of || []).map(structureNode)));
    case 'k_of_n': return el('li', null, `${body.k} of ${(body.of || []).length}`, el('ul', { class: 'tree' }, (body.of || []).map(structureNode)));
    case 'conditional': return el('li', null, 'conditional', el('ul', { class: 'tree' },
      (body || []).map((b) => el('li', null, `p = ${b.p}`, el('ul', { class: 'tree' }, structureNode(b.then))))));
    default: return el('li', null, code(json(n)));
  }
}

async function compositionPage(id) {
  const [c, history] = await Promise.all([
    api('/v1/compositions/' + idPath(id)),
    api('/v1/verdicts?order=asc&limit=500&composition=' + encodeURIComponent(id)),
  ]);
  const q = c.quality;
  const out = [el('h1', null, 'Composition ', code(c.composition_id)),
    kv(
      'declared', c.declared ? 'yes' : badge('not declared: seen in traces only', 'warn'),
      'tools', list(c.tools, code), 'requirement', pct(c.requirement),
      'composed quality', q ? el('span', { id: 'composed' }, pct(q.composed),
        q.lower !== null && q.lower !== undefined ? muted(` (bounds ${pctText(q.lower)} – ${pctText(q.upper)})`) : null,
        q.confidence ? [' ', badge(q.confidence, 'muted')] : null) : muted(c.pending || 'no verdict yet'),
      'against the requirement', q && q.meets_requirement !== null ? (q.meets_requirement ? badge('meets it', 'ok') : badge('below it', 'bad')) : muted('no requirement'),
      'lower bound', q && q.lower_meets_requirement !== null ? (q.lower_meets_requirement ? badge('meets it', 'ok') : badge('below it', 'bad')) : muted('n/a'),
      'latest verdict', c.latest_verdict ? el('span', null, badge(c.latest_verdict.verdict, 'verdict'), ' ', c.latest_verdict.summary || '') : muted('none'),
      'observed runs', c.observed ? `${c.observed.successes} successes of ${c.observed.runs}` : muted('none'))];
  out.push(el('h2', null, 'Structure'));
  out.push(c.structure ? el('ul', { class: 'tree structure' }, structureNode(c.structure)) : el('p', { class: 'muted' }, 'Not declared.'));
  out.push(el('h2', null, 'Observed success over time'));
  const points = history.verdicts.map((v) => ({ t: v.time, d: (v.event && v.event.data) || {} })).filter((p) => p.d.observed);
  out.push(points.length ? successChart(points, c.requirement)
    : el('p', { class: 'muted' }, 'No observed checkpoint yet: a verdict compares observed runs every 30 runs seen in traces.'));
  out.push(el('h2', null, 'Verdicts'));
  out.push(verdictTable(history.verdicts.slice().reverse(), false));
  show(out);
}

// A small line chart of the observed success rate (with its bounds) at
// each checkpoint verdict, the predicted quality and the requirement.
function successChart(points, requirement) {
  const W = 480, H = 140, L = 36, R = 8, T = 8, B = 18;
  const ns = 'http://www.w3.org/2000/svg';
  const s = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const vals = points.flatMap((p) => [p.d.observed.success_rate_lower, p.d.observed.success_rate_upper, p.d.observed.predicted_quality]);
  if (requirement !== null && requirement !== undefined) vals.push(requirement);
  const lo = Math.max(0, Math.min(...vals) - 0.05), hi = Math.min(1, Math.max(...vals) + 0.02);
  const x = (i) => L + (points.length === 1 ? (W - L - R) / 2 : i * (W - L - R) / (points.length - 1));
  const y = (v) => T + (hi - v) / Math.max(hi - lo, 1e-9) * (H - T - B);
  const svg = s('svg', { class: 'chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img' });
  svg.append(s('title', {}, 'observed success rate per checkpoint'));
  for (const v of [lo, hi]) svg.append(s('text', { x: 2, y: y(v) + 3 }, (100 * v).toFixed(0) + '%'));
  if (requirement !== null && requirement !== undefined) {
    svg.append(s('line', { x1: L, x2: W - R, y1: y(requirement), y2: y(requirement), stroke: '#b3261e', 'stroke-dasharray': '4 3' }));
    svg.append(s('text', { x: W - R - 70, y: y(requirement) - 3 }, 'requirement'));
  }
  const line = (f, attrs) => s('polyline', { fill: 'none', points: points.map((p, i) => `${x(i)},${y(f(p.d.observed))}`).join(' '), ...attrs });
  svg.append(line((o) => o.predicted_quality, { stroke: '#69737d', 'stroke-dasharray': '2 2' }));
  svg.append(line((o) => o.success_rate, { stroke: '#1f5fbf', 'stroke-width': 2 }));
  points.forEach((p, i) => {
    const o = p.d.observed;
    svg.append(s('line', { x1: x(i), x2: x(i), y1: y(o.success_rate_lower), y2: y(o.success_rate_upper), stroke: '#1f5fbf', 'stroke-opacity': 0.4, 'stroke-width': 4 }));
    svg.append(s('line', { x1: x(i) - 8, x2: x(i) + 8, y1: y(o.predicted_quality), y2: y(o.predicted_quality), stroke: '#69737d', 'stroke-width': 2 }));
    const dot = s('circle', { class: 'point', cx: x(i), cy: y(o.success_rate), r: 3, fill: o.correlated_errors ? '#b3261e' : '#1f5fbf' });
    dot.append(s('title', {}, `${when(p.t)}: ${o.successes}/${o.runs} = ${(100 * o.success_rate).toFixed(1)}% (predicted ${(100 * o.predicted_quality).toFixed(1)}%)`));
    svg.append(dot);
  });
  svg.append(s('text', { x: L, y: H - 4 }, when(points[0].t)));
  if (points.length > 1) svg.append(s('text', { x: W - R - 110, y: H - 4 }, when(points[points.length - 1].t)));
  return el('figure', null, svg, el('figcaption', { class: 'muted' },
    'Observed success rate at each checkpoint (bar: its 95% bounds), predicted quality grey, requirement dashed.'));
}

async function agentsPage() {
  const a = await api('/v1/agents');
  const out = [el('h1', null, 'Agents')];
  if (!a.agents.length) out.push(el('p', { class: 'muted' }, 'No agents yet: an agent is known from its invocations or a directive about it.'));
  for (const ag of a.agents) {
    out.push(el('h2', { 'data-agent': ag.agent_id }, ag.agent_id));
    out.push(el('p', null, 'Uses ', list(ag.tools, (t) => el('a', { href: toolHref(t.tool_id) }, t.tool_id)), '.'));
    if (ag.directives.length) {
      out.push(table(['Tool', 'Directive', 'Verdict', 'Migration'], ag.directives.map((d) => el('tr', { class: 'directive' },
        el('td', null, el('a', { href: toolHref(d.tool_id) }, d.tool_id)), el('td', null, directiveCell(d)),
        el('td', null, d.verdict.name, ' ', muted(when(d.verdict.time))), el('td', null, migration(d.migration))))));
    } else out.push(el('p', { class: 'muted' }, 'No directive of its own: it proceeds (unless a tool-wide or composition directive below says otherwise).'));
  }
  out.push(el('h2', null, 'Tool-wide directives'));
  out.push(a.tool_directives.length ? table(['Tool', 'Directive', 'Verdict'], a.tool_directives.map((d) => el('tr', null,
    el('td', null, el('a', { href: toolHref(d.tool_id) }, d.tool_id)), el('td', null, directiveCell(d)), el('td', null, d.verdict.name))))
    : el('p', { class: 'muted' }, 'None.'));
  out.push(el('h2', null, 'Composition directives (every agent that runs the workflow)'));
  out.push(a.composition_directives.length ? table(['Composition', 'Directive', 'Verdict'], a.composition_directives.map((d) => el('tr', null,
    el('td', null, el('a', { href: compositionHref(d.composition_id) }, d.composition_id)), el('td', null, directiveCell(d)), el('td', null, d.verdict.name))))
    : el('p', { class: 'muted' }, 'None.'));
  show(out);
}

// The live feed: the newest verdicts that pass the filters, then the
// verdict stream from there (server-sent events read with fetch, so that
// the Authorization header goes along; EventSource cannot send it).
async function feedPage(params) {
  const f = { guard: params.get('guard') || '', verdict: params.get('verdict') || '', tool: params.get('tool') || '', agent: params.get('agent') || '' };
  const input = (name, placeholder) => el('label', null, name, el('input', { name, value: f[name], placeholder }));
  const status = el('span', { id: 'feed-status', class: 'muted' }, 'connecting…');
  const form = el('form', { class: 'filters', id: 'feed-filters', onsubmit: (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
    location.hash = '#/feed' + (q.toString() ? '?' + q : '');
  } },
  el('label', null, 'guard', el('select', { name: 'guard' }, ['', 'schema', 'composition'].map((g) => el('option', { value: g, selected: g === f.guard }, g || 'any')))),
  input('verdict', 'DRIFT_ON_USED_FIELDS'), input('tool', 'server/tool'), input('agent', 'agent id'),
  el('button', { type: 'submit' }, 'Filter'), status);
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) query.set(k, v);
  const page = await api('/v1/verdicts?limit=50&' + query);
  const tbody = el('tbody');
  const tbl = el('table', { class: 'verdicts feed' }, el('thead', null, el('tr', null,
    ['Time', 'Guard', 'Verdict', 'Tool / composition', 'Agent', 'Action', 'Summary'].map((h) => el('th', null, h)))), tbody);
  for (const v of page.verdicts) tbody.append(verdictRow(v, true));
  show(el('h1', null, 'Live verdict feed'), form, tbl);
  const cursor = page.verdicts.length ? page.verdicts[0].sequence : null;
  if (cursor) query.set('cursor', cursor);
  const ctl = new AbortController();
  leave = () => ctl.abort();
  streamVerdicts('/v1/verdicts/stream?' + query, ctl.signal, (v) => {
    tbody.prepend(verdictRow(v, true));
    while (tbody.children.length > 500) tbody.lastChild.remove();
  }, (s) => { status.textContent = s; });
}

async function streamVerdicts(url, signal, onVerdict, onStatus) {
  let last = null;
  while (!signal.aborted) {
    try {
      const headers = { Accept: 'text/event-stream', ...authHeaders() };
      if (last) headers['Last-Event-ID'] = String(last);
      const resp = await fetch(url, { headers, signal });
      if (!resp.ok) {
        const body = await resp.json().catch(() => ({}));
        onStatus(`stream: ${resp.status} ${body.error || ''}`);
        if (resp.status === 400 || resp.status === 401) return;
      } else {
        onStatus('live');
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const ev = { event: 'message', data: '' };
            for (const line of block.split('\n')) {
              const c = line.indexOf(':');
              if (c === 0) continue; // a comment: keep-alive
              const field = c < 0 ? line : line.slice(0, c), val = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
              if (field === 'data') ev.data += (ev.data ? '\n' : '') + val;
              else if (field === 'id') ev.id = val;
              else if (field === 'event') ev.event = val;
            }
            if (ev.event === 'verdict' && ev.data) {
              if (ev.id) last = ev.id;
              onVerdict(JSON.parse(ev.data));
            } else if (ev.event === 'error') onStatus('stream: ' + (JSON.parse(ev.data || '{}').error || 'error'));
          }
        }
        onStatus('reconnecting…');
      }
    } catch (e) {
      if (signal.aborted) return;
      onStatus('reconnecting… (' + e.message + ')');
    }
    await new Promise((r) => setTimeout(r, 3000));
  }
}

async function deadLettersPage() {
  const d = await api('/v1/deadletters?limit=50');
  const reasons = Object.entries(d.by_reason).sort(([, a], [, b]) => b - a);
  show(el('h1', null, 'Dead letters'),
    el('p', { id: 'dlq-total' }, `${d.total} dead letters in the stream. Bodies are never shown: they are the original bytes, which may hold agents' argument values.`),
    el('h2', null, 'By reason'),
    reasons.length ? table(['Reason', 'Count'], reasons.map(([r, n]) => el('tr', { class: 'reason', 'data-reason': r }, el('td', null, code(r)), el('td', null, n))))
      : el('p', { class: 'muted' }, 'None.'),
    el('h2', null, 'Latest'),
    d.latest.length ? table(['Time', 'Reason', 'Error', 'Original subject', 'Stream sequence', 'Message id', 'Deliveries'], d.latest.map((x) => el('tr', { class: 'deadletter' },
      el('td', null, when(x.time)), el('td', null, code(x.reason)), el('td', null, x.error), el('td', null, code(x.original_subject || '')),
      el('td', null, x.original_stream ? `${x.original_stream} #${x.original_sequence}` : ''), el('td', null, code(x.original_msg_id || '')),
      el('td', null, x.delivered || ''))))
      : el('p', { class: 'muted' }, 'None.'));
}

// --- routing ---------------------------------------------------------------

function route() {
  if (leave) { leave(); leave = null; }
  let hash = location.hash.replace(/^#/, '') || '/fleet';
  const q = hash.indexOf('?');
  const params = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : '');
  const path = q >= 0 ? hash.slice(0, q) : hash;
  if (params.has('token')) { // once, from the address: kept for the tab, then taken out of it
    sessionStorage.setItem(TOKEN_KEY, params.get('token'));
    params.delete('token');
    hash = path + (params.toString() ? '?' + params : '');
    history.replaceState(null, '', '#' + hash);
  }
  const parts = path.split('/').filter((p) => p);
  const rest = decodeURIComponent(parts.slice(1).join('/'));
  const page = parts[0] || 'fleet';
  for (const a of document.querySelectorAll('nav a')) {
    a.classList.toggle('active', a.dataset.page === page || (a.dataset.page === 'compositions' && page === 'composition'));
  }
  const pages = {
    fleet: () => fleetPage(), tool: () => toolPage(rest), compositions: () => compositionsPage(),
    composition: () => compositionPage(rest), agents: () => agentsPage(), feed: () => feedPage(params),
    deadletters: () => deadLettersPage(),
  };
  const run = pages[page] || (() => show(el('p', { class: 'error' }, 'No page ' + page + '.')));
  document.title = 'toolsentry · ' + page;
  Promise.resolve().then(run).catch(showError);
}

document.getElementById('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const t = document.getElementById('token').value.trim();
  if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById('token').value = '';
  route();
});
window.addEventListener('hashchange', route);
route();
