// LM Warden's replica panel. It reads the admin API (/warden/v1/models...), the same JSON an
// operator's scripts read, and refreshes every two seconds.
'use strict';

const REFRESH_MS = 2000;
// An admin API that takes longer than this is taken for one that does not answer (a gateway
// stopped or overloaded): the page greys out rather than showing old figures as current.
const REQUEST_TIMEOUT_MS = 6000;
const NOT_FOUND_REFRESH_MS = 10000;
const app = document.getElementById('app');
const statusEl = document.getElementById('status');
const COLORS = ['#2f5bd3', '#d1495b', '#2a9d8f', '#e9a03b', '#7b4fc9', '#4e8f2f', '#c2577e', '#8c6d31',
                '#17becf', '#e377c2', '#636363', '#bcbd22'];
// Replica r's colour: the palette's, then hues spread by the golden angle (found by review: with
// more replicas than colours, r8 was drawn as r0).
function colorOf(r) {
  if (r < COLORS.length) return COLORS[r];
  // (As #rrggbb, which tint() mixes: HSL with saturation 0.55 and lightness 0.48.)
  const h = (r * 137.508) % 360, s = 0.55, l = 0.48;
  const f = (n) => {
    const k = (n + h / 30) % 12;
    const c = l - s * Math.min(l, 1 - l) * Math.max(-1, Math.min(k - 3, 9 - k, 1));
    return Math.round(255 * c).toString(16).padStart(2, '0');
  };
  return `#${f(0)}${f(8)}${f(4)}`;
}

function token() { return localStorage.getItem('warden-admin-token') || ''; }
// The operator cancelled the token prompt: not asked again until the page is reloaded.
let tokenDeclined = false;

// The gateway answered, and refused (`status`: its HTTP status), as opposed to not answering.
// Settings changed through this page or the admin API that the config file gives otherwise: a
// restart keeps them when the gateway has a state file, until the file changes them.
// What the panel offers for admission (docs/policies.md): off, first come first served, recent
// conversations first, reservations for a conversation's next turn.
const ADMISSION_MODES = ['off', 'fifo', 'recent:4', 'reserve:2', 'reserve:3'];

function patchedBadge(patched, badge) {
  const changes = Object.entries(patched || {});
  if (!changes.length) return [];
  const text = changes.map(([setting, p]) => `${setting.replace(/_/g, ' ')} ${p.value} (config: ${p.config})`);
  return [badge('changed at runtime: ' + text.join(', '), '',
                'Set through this page or the admin API, not in the config file. With a state file a restart keeps it, until the config file changes it (at the restart, or on SIGHUP).')];
}

class Refusal extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// One admin API request and its JSON answer, given up after REQUEST_TIMEOUT_MS.
async function fetchJson(path, options, headers) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), REQUEST_TIMEOUT_MS);
  try {
    const res = await fetch(path, Object.assign({}, options, {headers, signal: abort.signal}));
    // An error page of a proxy in front of the gateway is no JSON: its status says enough.
    const body = res.status === 401 ? null : await res.json().catch(() => null);
    if (res.ok && body === null) throw new Error('the answer is not the admin API\'s JSON');
    return {res, body};
  } catch (e) {
    throw new Error(abort.signal.aborted ? `no answer in ${REQUEST_TIMEOUT_MS / 1000} s` : e.message);
  } finally {
    clearTimeout(timer);
  }
}

// Asks for the admin token in a password field (window.prompt shows it in clear: found by
// review); the token given, or null when declined.
function askToken(message) {
  return new Promise((resolve) => {
    const input = el('input', {type: 'password', id: 'token-input', autocomplete: 'current-password',
                               'aria-label': 'Admin token'});
    const dialog = el('dialog', {id: 'token-dialog', 'aria-label': 'Admin token'},
      el('form', {method: 'dialog'},
        el('p', {}, message), input, ' ',
        el('button', {value: 'ok', class: 'primary', id: 'token-ok'}, 'OK'), ' ',
        el('button', {value: 'cancel', id: 'token-cancel', formnovalidate: ''}, 'Cancel')));
    dialog.addEventListener('close', () => {
      dialog.remove();
      resolve(dialog.returnValue === 'ok' && input.value ? input.value : null);
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

async function api(path, options = {}) {
  const headers = Object.assign({'Content-Type': 'application/json'}, options.headers || {});
  if (token()) headers.Authorization = 'Bearer ' + token();
  const {res, body} = await fetchJson(path, options, headers);
  if (res.status === 401 && !tokenDeclined) {
    const refused = token() !== '';
    localStorage.removeItem('warden-admin-token');
    const t = await askToken(refused ? 'The gateway refused that token. Its admin token:'
                                     : 'This gateway needs its admin token:');
    if (t) { localStorage.setItem('warden-admin-token', t); return api(path, options); }
    tokenDeclined = true;
  }
  if (res.status === 401) throw new Refusal('the admin API needs its token: reload the page to give it', 401);
  if (!res.ok) throw new Refusal((body && body.error && body.error.message) || `HTTP ${res.status} ${res.statusText}`, res.status);
  return body;
}

// Runs an operator's action; says so when the gateway refuses it or cannot be reached. Whether it
// was done.
async function act(what, action) {
  try {
    await action();
    return true;
  } catch (e) {
    alert(`${what}: ${e.message}`);
    return false;
  }
}

const fmtTime = (t, seconds = false) => t === null || t === undefined ? '–' :
  new Date(t * 1000).toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', ...(seconds ? {second: '2-digit'} : {})});
// A colour mixed with white, `share` of it kept: an opaque tint.
function tint(hex, share) {
  const n = parseInt(hex.slice(1), 16);
  const mix = (c) => Math.round(255 - (255 - c) * share);
  return `rgb(${mix(n >> 16)}, ${mix((n >> 8) & 255)}, ${mix(n & 255)})`;
}
const fmtInt = (n) => n === null || n === undefined ? '–' : Math.round(n).toLocaleString('en-US');
// An axis figure in a few characters: 1.5 M, 500 K, 80.
const fmtCompact = (n) => n >= 1e6 ? `${+(n / 1e6).toFixed(1)} M` : n >= 1e3 ? `${+(n / 1e3).toFixed(1)} K` : `${+n.toFixed(1)}`;
const fmtPct = (x) => x === null || x === undefined ? '–' : (100 * x).toFixed(1) + ' %';
const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
// A sum of figures some of which may be unknown (null: a replica that does not answer).
const sumKnown = (values) => {
  const known = values.filter((v) => v !== null && v !== undefined);
  return known.length ? known.reduce((a, b) => a + b, 0) : null;
};
const layoutText = (m) => `${plural(m.replicas.length, 'replica')} · ` +
  (m.layout === 'data-parallel' ? `one data-parallel server${m.replicas.length ? ' at ' + m.replicas[0].url : ''}` : 'a server each');
// Replicas that take new requests: healthy and not draining.
const inService = (replicas) => replicas.filter((r) => r.healthy && !r.draining).length;
// A duration in seconds, in the largest unit that keeps it whole enough to read: "6 s", "1 min", "1.5 h".
const fmtDuration = (s) => {
  const round = (x) => String(Math.round(10 * x) / 10);
  return s < 60 ? round(s) + ' s' : s < 3600 ? round(s / 60) + ' min' : round(s / 3600) + ' h';
};
// GiB as vLLM's --kv-offloading-size takes them: "16 GiB", "0.5 GiB".
const fmtGib = (g) => `${Number(g.toPrecision(3))} GiB`;
const fmtK = (n) => n >= 1e6 ? (n / 1e6).toFixed(2) + ' M' : n >= 1e3 ? (n / 1e3).toFixed(1) + ' K' : String(n);
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

// The figures that look alike, and every column, said in words: a title shows only under a mouse.
const ALIKE_FIGURES = [
  ['stayed on replica', 'Of the turns after a conversation\'s first, the share served by the replica its previous turn ended on (the seed\'s measure; a turn can stay without being sticky, e.g. by load with affinity off)'],
  ['Sticky (All row, %)', 'Of the turns of conversations already placed, the share the gateway sent to their home replica: sticky / (sticky + overflow + re-homed)'],
  ['history read from cache', 'Of the previous prompt a returning turn carried to the same replica, the share the engine read from its prefix cache: whether the cache kept what affinity sent back to it'],
  ['% of tokens (All row) and the chart\'s headline', 'Of the prompt tokens the replicas\' usage reported, the share read from the prefix cache: the All row since the gateway started, the headline over the time it names; a request whose usage is unknown adds no tokens (the admin API counts it in usage_unknown)'],
];

function figureHelp() {
  const entry = ([term, text]) => [el('dt', {}, term), el('dd', {}, text)];
  return el('details', {class: 'figure-help', id: 'figure-help'},
    el('summary', {}, 'What these figures mean'),
    el('dl', {}, ...ALIKE_FIGURES.flatMap(entry),
      ...COLUMNS.filter((c) => c[3]).flatMap(([h, , , title]) => entry([h, title]))));
}

// With vLLM's balancer placing requests (affinity off on a data-parallel server), the figures of
// conversations the gateway follows leave its turns out: said beside them.
function gatewayOnly(m) {
  return m.engine_balanced && m.engine_balanced.in_flight + m.engine_balanced.requests > 0 &&
    !m.affinity && m.when_affinity_off === 'engine' ? ' (of the turns the gateway placed)' : '';
}

// The status is announced to a screen reader when it changes kind (stale, refused, updated), not
// at every refresh's new time (found by review: it spoke every two seconds).
let statusKind = null;
function setStatus(text, bad) {
  const kind = bad ? text : text.startsWith('updated') ? 'updated' : text;
  statusEl.setAttribute('aria-live', kind === statusKind ? 'off' : 'polite');
  statusKind = kind;
  statusEl.textContent = text;
  statusEl.style.color = bad ? '#ffb4ab' : '';
}

// The controls take no input while the page is stale: disabled, for the keyboard too (the
// stylesheet greys them out and stops the mouse).
function setControlsDisabled(disabled) {
  for (const c of document.querySelectorAll('main .controls input, main .controls select, ' +
                                            'main .controls button, main button.drain')) {
    c.disabled = disabled;
  }
}

// ---- index: every model ----
let indexShown = 0, indexRequested = 0;
async function renderIndex() {
  const seq = ++indexRequested;
  const {models} = await api('/warden/v1/models');
  const clients = await api('/warden/v1/clients');
  if (seq < indexShown) return;  // a later answer is already shown
  indexShown = seq;
  app.replaceChildren(el('h1', {}, 'Models'));
  const list = el('div', {class: 'models'});
  for (const m of models) {
    // What needs the operator's eye, on the list already.
    const unhealthy = m.replicas.filter((r) => !r.healthy).length;
    const alerts = [];
    if (unhealthy) alerts.push(el('span', {class: 'badge off'}, `${plural(unhealthy, 'replica')} unhealthy`));
    if (!inService(m.replicas)) alerts.push(el('span', {class: 'badge off'}, 'no replica in service: requests get 503'));
    const fit = workingSetState(m);
    if (fit === 'warning') alerts.push(el('span', {class: 'badge off'}, 'working set over the KV cache'));
    if (fit === 'caution') alerts.push(el('span', {class: 'badge sim'}, 'working set may not fit the KV cache'));
    const uncached = withoutPrefixCache(m.replicas);
    if (uncached) alerts.push(el('span', {class: 'badge off'}, noPrefixCacheText(uncached)));
    list.append(el('div', {class: 'card'},
      el('a', {href: '/panel/models/' + encodeURIComponent(m.name)}, m.name),
      ...(m.simulated ? [' ', el('span', {class: 'badge sim'}, 'simulated replicas')] : []),
      ...alerts.flatMap((a) => [' ', a]),
      el('div', {class: 'muted'}, `${layoutText(m)} · affinity ${m.affinity ? 'on' : 'off'} · ` +
        `${fmtInt(m.totals.requests)} requests · ${fmtPct(m.history.cached_share)} of prompt tokens from cache ` +
        `(${historySpan(m.history, m.started_unix)})`)));
  }
  app.append(list);
  if (clients.keys_required) app.append(clientsTable(clients));
  setStatus('updated ' + new Date().toLocaleTimeString());
}

// A key's tokens_per_minute: what is left of it now, and the requests it refused.
function budgetText(c) {
  if (!c.tokens_per_minute) return 'none';
  const left = c.budget_left >= 0 ? `${fmtK(c.budget_left)} of ${fmtK(c.tokens_per_minute)} left`
    : `owes ${fmtK(-c.budget_left)} of ${fmtK(c.tokens_per_minute)}`;
  return left +
    (c.budget_limited ? ` · ${fmtInt(c.budget_limited)} refused (429)` : '');
}

// Each API key's usage, by name, when the gateway asks for keys.
function clientsTable({clients, unauthorized}) {
  const head = el('tr', {}, ...['Client', 'Requests', 'In flight', 'Prompt tokens', 'From cache', 'Output tokens',
    'Budget (tokens/min)'].map((h) => el('th', {}, h)));
  const rows = clients.map((c) => el('tr', {class: 'client'},
    el('td', {}, c.name), el('td', {}, fmtInt(c.requests)),
    el('td', {}, fmtInt(c.in_flight) + (c.max_in_flight ? ` of ${fmtInt(c.max_in_flight)}` : '') +
      (c.limited ? ` · ${fmtInt(c.limited)} refused (429)` : '')),
    el('td', {}, fmtK(c.prompt_tokens)),
    el('td', {}, c.prompt_tokens ? fmtPct(c.cached_prompt_tokens / c.prompt_tokens) : '–'),
    el('td', {}, fmtK(c.output_tokens)),
    el('td', {title: 'engine work a minute: prompt tokens not read from the cache, and output tokens'},
      budgetText(c))));
  return el('section', {id: 'clients'}, el('h2', {}, 'Clients (API keys)'),
    el('table', {}, el('thead', {}, head), el('tbody', {}, ...rows)),
    el('div', {class: 'muted'}, `${fmtInt(unauthorized)} requests refused without a valid key`));
}

// ---- a model's page ----
// What a draining replica still runs: requests of this gateway's and its peers', or what the
// engine ran or queued at its last scrape (the same requests, and any other client's) if more.
function drainLeft(r) {
  if (!r.healthy) return 'not answering';
  const left = Math.max(r.in_flight + r.peer_in_flight, (r.running || 0) + (r.waiting || 0));
  return left ? `${fmtInt(left)} left` : 'idle';
}

// Replicas whose vLLM runs without its prefix cache (--no-enable-prefix-caching), and what that
// means, said once per model.
function withoutPrefixCache(replicas) {
  return replicas.filter((r) => r.prefix_caching === false).length;
}
function noPrefixCacheText(n) {
  return `prefix caching off on ${plural(n, 'replica')}: every turn there is computed whole`;
}

// [header, cell, class, what the column counts (the header's tooltip)].
const COLUMNS = [
  ['Replica', (r) => String(r.index), '', 'The replica\'s index (r0, r1, ... in the chart)'],
  // In the data-parallel layout every replica has the same URL (in the header): the rank says it.
  ['URL', (r) => r.rank !== null ? `rank ${r.rank}` : el('span', {class: 'clip'}, r.url), 'url',
   'Its server (one vLLM per GPU), or its data-parallel rank on the one server in the header'],
  // A draining replica can be restarted once it is idle: nothing left there of this gateway's,
  // its peers' or anyone's (the engine's own counts).
  ['Healthy', (r) => el('span', {},
    (r.healthy ? (r.waking ? '✓ waking' : r.asleep ? '✓ asleep, wakes on request' : '✓') : (String(r.health_problem || '').startsWith('asleep') ? '✗ asleep' : '✗ down') +
      (r.unhealthy_since_unix ? ' since ' + fmtTime(r.unhealthy_since_unix, true) : '')),
    r.failed ? el('span', {class: 'bad-count'}, ` · ${fmtInt(r.failed)} failed`) : '',
    r.error_answers ? el('span', {class: 'bad-count'}, ` · ${fmtInt(r.error_answers)} errors`) : '',
    r.failing ? el('span', {class: 'bad-count'}, ' · failing: passed over') : '',
    r.draining ? ' · draining · ' + drainLeft(r) : ''), 'health',
   'Its /health answers (✗: it does not, or its engines sleep, and no new request goes there; with idle_sleep a sleeping replica stays in service, its next request wakes it); requests that failed there since the gateway started, and those it answered with a server error (5xx) or 429 (failing: its last answers were server errors, for more than one conversation, and requests go elsewhere for 5 s)'],
  ['Requests', (r) => fmtInt(r.requests), '', 'Requests this replica answered (a stream: as it began; a whole response: at its end) or failed, or whose client left while it worked on them, since the gateway started (new + sticky + overflow + re-homed + by load)'],
  ['New', (r) => fmtInt(r.new), '', 'Conversations placed there as new (their first turn; one sent again elsewhere after a failure there counts again where it went)'],
  ['Sticky', (r) => fmtInt(r.sticky), '', 'Turns of a known conversation that went to its home, this replica'],
  ['Overflow', (r) => fmtInt(r.overflow), '', 'Turns sent here because their home was past the overflow limit'],
  ['Re-homed', (r) => fmtInt(r.rehomed), '', 'Turns of conversations whose home was down or out of service: their conversation was given this replica as its new home'],
  ['By load', (r) => fmtInt(r.balanced), '', 'Requests placed by load alone: no session key, an auxiliary request, or affinity off'],
  ['Running', (r) => fmtInt(r.running), '', 'Requests the engine runs now (vllm:num_requests_running)'],
  // The engine's queue, and with admission on, the requests held at the gateway for the replica.
  ['Waiting', (r) => fmtInt(r.waiting) + (r.held ? ` + ${fmtInt(r.held)} held` : ''), '',
   'Requests queued in the engine (vllm:num_requests_waiting), and those admission holds at the gateway'],
  ['KV cache in use', (r) => fmtPct(r.kv_cache_usage), '', 'vllm:kv_cache_usage_perc'],
  // A replica that is down has no current hit rate: its last one would pass for it.
  ['Prefix-cache hits', (r) => (r.prefix_caching === false ? 'caching off' : !r.healthy ? '–'
    : fmtPct(r.prefix_hit_rate) + (typeof r.external_prefix_hit_rate === 'number' ? ` + ${fmtPct(r.external_prefix_hit_rate)} from CPU` : '')), 'wrap',
   'The engine\'s prefix-cache hit rate since the gateway first read it (its own counters: of every prompt token it looked up, the share found cached, first turns and shared system prompts included); with vLLM\'s CPU offloading (--kv-offloading-size), + the share read back from host memory'],
  ['Active conv.', (r) => fmtInt(r.active_conversations), '', 'Conversations homed there and seen within the idle timeout'],
  // The context of the conversations going on there (seen within the working set's window).
  // (Over the cache, in the bad colour: by this count the conversations there evict each other.)
  ['Recent context / KV', (r) => !r.kv_cache_tokens ? '–'
    : el('span', r.recent_context_tokens > r.kv_cache_tokens ? {class: 'bad-count'} : {},
      `${fmtK(r.recent_context_tokens)} / ${fmtK(r.kv_cache_tokens)} ` +
      `(${(100 * r.recent_context_tokens / r.kv_cache_tokens).toFixed(0)} %)`), 'wrap',
   'The context of the conversations seen there lately (those that just ended too), against its KV cache: the working set card\'s count, per replica'],
];

// The footer's active conversations: the rows' (those homed on a replica), and those no replica
// is home to (affinity off, or a policy that places every turn afresh), which the working set
// counts too.
function activeTotal(m) {
  const homed = m.replicas.reduce((a, r) => a + (r.active_conversations || 0), 0);
  const all = m.working_set ? m.working_set.active_conversations : homed;
  return el('td', {id: 'total-active', title: 'conversations seen within the idle timeout: those homed on a replica, and those placed afresh every turn (no home)'},
    all > homed ? `${fmtInt(homed)} + ${fmtInt(all - homed)} no home` : fmtInt(all));
}

// Replicas down, and the share of them taking new requests, when not all are: a replica lost
// or drained is capacity gone, which a row's tint alone does not sum up.
function capacityBadges(replicas, badge) {
  const down = replicas.filter((r) => !r.healthy).length;
  const draining = replicas.filter((r) => r.healthy && r.draining).length;
  const serving = inService(replicas);
  if (!down && !draining) return [];
  const why = [down ? `${down} down` : '', draining ? `${draining} draining` : ''].filter(Boolean).join(', ');
  return [badge(`${serving} of ${replicas.length} replicas in service (${why})`,
                down || serving < replicas.length / 2 ? 'off' : 'sim')];
}

// How long the gateway has run, while under the chart's hour: its counters and chart start then.
// Both times are the gateway's clock (the browser's may differ).
function uptimeBadge(startedUnix, nowUnix, badge) {
  if (typeof startedUnix !== 'number' || typeof nowUnix !== 'number') return [];
  const up = nowUnix - startedUnix;
  return up < 3600 ? [badge(`gateway up ${fmtDuration(Math.max(0, up))}: counts since ${fmtTime(startedUnix)}`)] : [];
}

// The peer gateways (this one left out), and whether the last message to each was answered: red
// when one was not, with the peers' errors on hover. None without peers.
function peersBadge(status, badge) {
  const peers = status && Array.isArray(status.peers) ? status.peers.filter((p) => !p.self) : [];
  if (!peers.length) return [];
  const failing = peers.filter((p) => p.failures_in_a_row > 0 || p.last_ok_unix === null);
  const title = failing.map((p) => `${p.url}: ${p.last_error || 'not answered yet'}`).join('\n');
  return [badge(`peers: ${peers.length - failing.length} of ${peers.length} answering`, failing.length ? 'off' : '', title)];
}

// The seed's rule of thumb for a model: 'fits'; 'caution', over the cache by the count alone (the
// window counts conversations that just ended); 'warning' once the replicas show it too: turns
// reading little of their history, or a cache over its own count nearly full.
function workingSetState(m) {
  const ws = m.working_set;
  if (!ws || ws.fits) return 'fits';
  const evicting = (m.history_read_from_cache !== null && m.history_read_from_cache !== undefined &&
                    m.history_read_from_cache < 0.5) ||
    m.replicas.some((r) => r.kv_cache_usage !== null && r.kv_cache_usage >= 0.95 &&
                           r.kv_cache_tokens && r.recent_context_tokens > r.kv_cache_tokens);
  return evicting ? 'warning' : 'caution';
}

// Refreshes (2 s each) the working set stays red after the replicas last showed it over.
const WARNING_HOLD = 5;

// What the chart's hour covers, in a few words: the last hour, or since the counts started.
function historySpan(h, startedUnix) {
  const since = typeof h.since_unix === 'number' ? h.since_unix : startedUnix;
  const young = typeof since === 'number' && typeof h.now_unix === 'number' && h.now_unix - since < 3600;
  return young ? `since ${fmtTime(since)}` : 'last hour';
}

// The share of the prompt tokens of the last `seconds` (whole buckets of the chart's history)
// that were read from cache; null when there were none.
const RECENT_SHARE_S = 300;
function recentCachedShare(h, seconds) {
  const n = Math.max(1, Math.round(seconds / (h.bucket_s || 10)));
  let cached = 0, computed = 0;
  const engine = h.engine_balanced && h.engine_balanced.cached ? [h.engine_balanced] : [];
  for (const r of [...h.replicas, ...engine]) {
    cached += r.cached.slice(-n).reduce((a, b) => a + b, 0);
    computed += r.computed.slice(-n).reduce((a, b) => a + b, 0);
  }
  return cached + computed > 0 ? cached / (cached + computed) : null;
}

// The chart's layers from the admin API's history: every replica's (then vLLM's balancer's, if it
// placed any) cached prompt tokens per second, then every one's computed, per bucket.
// `sinceUnix`: when the chart's counts start (the gateway's start, or earlier with its state
// file); no bucket before it is drawn (nothing was counted then, which a zero would pass for no
// traffic).
function chartLayers(h, replicas, sinceUnix) {
  // A gateway up for less than the hour: start the axis shortly before its first tokens.
  const total = h.replicas.length ? h.replicas[0].cached.length : 0;
  const engine = h.engine_balanced && h.engine_balanced.cached ? [h.engine_balanced] : [];
  let skip = total;
  for (const r of [...h.replicas, ...engine]) {
    const first = r.cached.findIndex((v, i) => v > 0 || r.computed[i] > 0);
    if (first >= 0) skip = Math.min(skip, first);
  }
  skip = Math.max(0, Math.min(skip, total - 30) - 3);
  // Buckets before the chart's counts start are gaps (null), but the one just before, a zero the
  // first figures rise from.
  const startBucket = typeof sinceUnix === 'number' && h.bucket_s > 0
    ? Math.floor((sinceUnix - h.start_unix) / h.bucket_s) : -Infinity;
  // Nor is the axis drawn much before them (a minute at least is shown).
  skip = Math.max(skip, Math.min(startBucket - 1, total - 6));
  // So are the buckets of a time the gateway was down (between a state file's save and a restart).
  const gaps = Array.isArray(h.gaps) ? h.gaps : [];
  const down = (i) => {  // the whole bucket (one that counted before the stop is drawn)
    const start = h.start_unix + (skip + i) * h.bucket_s;
    return gaps.some(([from, to]) => start >= from && start + h.bucket_s <= to);
  };
  const unknown = (i) => skip + i < startBucket - 1 || down(i);
  // The last bucket is still filling: its rate is over the time it has run, once that is half a
  // bucket (before, a request or two would make a spike); until then it is left out.
  const lastStart = h.start_unix + (total - 1) * h.bucket_s;
  const filled = h.now_unix === undefined ? 0 : Math.min(h.bucket_s, h.now_unix - lastStart);
  const end = filled >= h.bucket_s / 2 ? total : Math.max(skip, total - 1);
  const seconds = (i) => skip + i === total - 1 ? filled : h.bucket_s;
  const xs = Array.from({length: end - skip}, (_, i) => h.start_unix + (skip + i) * h.bucket_s);
  const perSecond = (values) => values.slice(skip, end).map((v, i) => unknown(i) ? null : v / seconds(i));
  const owners = [];
  for (let r = 0; r < replicas; ++r) owners.push({owner: `r${r}`, color: colorOf(r), series: h.replicas[r]});
  // Affinity off in a data-parallel layout: vLLM's balancer placed these, on no known replica.
  for (const e of engine) {
    if (e.cached.some((v, i) => v > 0 || e.computed[i] > 0)) owners.push({owner: 'engine-placed', color: '#888888', series: e});
  }
  // Every replica's cached tokens below, every replica's computed ones above: the split between
  // the two reads at a glance, and each replica's share within each. Opaque fills (a replica's
  // colour, and a tint of it for what was computed): each stack is drawn over the taller ones, so
  // see-through fills would mix colours the legend does not have.
  const layers = [], rates = [];
  for (const {owner, color, series} of owners) {
    layers.push({owner, kind: 'cached', label: `${owner} cached`, stroke: color, fill: color});
    rates.push(perSecond(series.cached));
  }
  for (const {owner, color, series} of owners) {
    layers.push({owner, kind: 'computed', label: `${owner} computed`, stroke: color, fill: tint(color, 0.45)});
    rates.push(perSecond(series.computed));
  }
  for (let i = 0; i < layers.length; ++i) layers[i].rates = rates[i];
  return {xs, layers, rates};
}

// The chart's axis colours from the page's own (light or dark).
function axisColors() {
  const css = getComputedStyle(document.documentElement);
  const muted = css.getPropertyValue('--muted').trim() || '#6b7385';
  const line = css.getPropertyValue('--line').trim() || '#e2e5eb';
  return {stroke: muted, grid: {stroke: line, width: 1}, ticks: {stroke: line, width: 1}};
}

class ModelPage {
  constructor(name) {
    this.name = name;
    this.chart = null;
    this.requested = 0;  // refreshes asked for, and the latest whose answer is shown
    this.shown = 0;
    this.build();
  }

  build() {
    this.title = el('h1', {}, this.name);
    this.badges = el('div', {class: 'badges'});
    this.affinityButton = el('button', {id: 'affinity-toggle', class: 'primary', onclick: () => this.toggleAffinity()}, '…');
    this.overflowInput = el('input', {id: 'overflow-input', type: 'number', min: '1', step: '1'});
    // A value typed and not yet set is not written over by the refreshes (Escape gives it up).
    this.overflowEdited = false;
    const setOverflow = el('button', {id: 'overflow-set', onclick: () => this.setOverflow(Number(this.overflowInput.value))}, 'Set limit');
    this.overflowInput.addEventListener('input', () => { this.overflowEdited = true; });
    this.overflowInput.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') this.setOverflow(Number(this.overflowInput.value));
      if (e.key === 'Escape' && this.model) {
        this.overflowEdited = false;
        this.overflowInput.value = this.model.overflow_limit;
      }
    });
    const autoOverflow = el('button', {id: 'overflow-auto', onclick: () => this.setOverflow('auto')}, 'Auto');
    // The routing policy, changed at once for the next requests (conversations keep their homes).
    this.policySelect = el('select', {id: 'policy-select'});
    this.policySelect.addEventListener('change', () => this.setPolicy(this.policySelect.value));
    // Admission at the gateway (README: models[].admission), at once for the next requests.
    this.admissionSelect = el('select', {id: 'admission-select'});
    this.admissionSelect.addEventListener('change', () => this.setAdmission(this.admissionSelect.value));
    const controls = el('div', {class: 'controls'}, this.affinityButton,
      el('span', {class: 'control'}, el('label', {for: 'overflow-input', class: 'muted'}, 'Overflow limit'), this.overflowInput,
        setOverflow, autoOverflow),
      el('span', {class: 'control'}, el('label', {for: 'policy-select', class: 'muted'}, 'Policy'), this.policySelect),
      el('span', {class: 'control'}, el('label', {for: 'admission-select', class: 'muted'}, 'Admission'), this.admissionSelect));
    this.workingSet = el('div', {class: 'card', id: 'working-set'});
    this.tbody = el('tbody');
    this.tfoot = el('tfoot');
    const head = el('tr', {}, ...COLUMNS.map(([h, , cls, title]) =>
      el('th', Object.assign(cls ? {class: cls} : {}, title ? {title} : {}), h)), el('th', {}, ''));
    const table = el('table', {id: 'replicas'}, el('thead', {}, head), this.tbody, this.tfoot);
    this.share = el('span', {class: 'headline', id: 'cached-share'}, '–');
    this.shareOf = el('span', {class: 'muted', id: 'cached-share-of'}, 'of the hour\'s prompt tokens were read from cache');
    // The same over the last minutes: what the cache does now, which the hour's share lags.
    this.shareRecent = el('span', {class: 'recent-share', id: 'cached-share-recent'});
    this.chartBox = el('div', {id: 'chart'});
    this.legend = el('div', {class: 'chart-legend', id: 'chart-legend'});
    // What operators and health checks changed within the chart's hour, numbered as its markers.
    this.changesList = el('ol', {class: 'changes', id: 'changes'});
    this.changes = [];
    app.replaceChildren(
      el('div', {class: 'card'}, this.title, this.badges, controls),
      this.workingSet,
      el('div', {class: 'card'}, el('h2', {}, 'Replicas'),
        this.scrollHint = el('div', {class: 'muted scroll-hint'}, 'Scroll the table sideways for every column.'),
        this.tableWrap = el('div', {class: 'table-wrap'}, table), figureHelp()),
      el('div', {class: 'card'}, el('h2', {}, 'Prompt tokens per second, last hour: read from the prefix cache vs computed'),
        el('div', {}, this.share, ' ', this.shareOf, this.shareRecent),
        this.chartBox, this.legend, this.changesList));
    window.addEventListener('resize', () => {
      if (this.chart) this.chart.setSize(this.chartSize());
      this.showScrollHint();
    });
  }

  // Said whenever the table is wider than its card (the Drain buttons are in its last column).
  showScrollHint() {
    this.scrollHint.classList.toggle('shown', this.tableWrap.scrollWidth > this.tableWrap.clientWidth + 1);
  }

  async refresh() {
    const seq = ++this.requested;
    const m = await api('/warden/v1/models/' + encodeURIComponent(this.name));
    // The peers' state beside the model's, asked after it: a token the first asks for is then
    // known (in parallel, both would ask, and the second throw the first's answer away).
    const peers = await api('/warden/v1/peers').catch(() => null);
    if (seq < this.shown) return;  // a later answer (an action's refresh) is already shown
    this.shown = seq;
    this.model = m;
    this.renderHeader(m, peers);
    this.renderWorkingSet(m.working_set, m.admission, m);
    this.renderTable(m);
    this.changes = m.changes || [];
    this.renderChart(m.history, m.replicas.length, m.started_unix);  // (history.since_unix: its own start)
    this.renderChanges();
    setStatus('updated ' + new Date().toLocaleTimeString());
  }

  renderHeader(m, peers) {
    const badge = (text, cls = '', title = '') => el('span', title ? {class: 'badge ' + cls, title} : {class: 'badge ' + cls}, text);
    this.badges.replaceChildren(
      ...(m.simulated ? [badge(`SIMULATED replicas (${m.simulated}): no GPU, replies are filler`, 'sim')] : []),
      badge('affinity ' + (m.affinity ? 'on' : 'off'), m.affinity ? 'on' : 'off'),
      badge(`overflow limit ${m.overflow_limit}${m.overflow_limit_auto ? ' (auto)' : ''}`),
      badge(layoutText(m)),
      ...patchedBadge(m.patched, badge),
      // LoRA adapters and other names the replicas serve, which requests may name.
      ...(m.served_names && m.served_names.length ? [badge('also serves ' + m.served_names.join(', '))] : []),
      ...(inService(m.replicas) ? [] : [badge('no replica in service: requests get 503', 'off')]),
      ...capacityBadges(m.replicas, badge),
      ...uptimeBadge(m.started_unix, m.history.now_unix, badge),
      ...(withoutPrefixCache(m.replicas) ? [badge(noPrefixCacheText(withoutPrefixCache(m.replicas)), 'off')] : []),
      ...peersBadge(peers, badge),
      ...(m.admission && m.admission !== 'off' ? [badge('admission ' + m.admission)] : []),
      badge(`stayed on replica ${fmtPct(m.stayed_on_replica)}${gatewayOnly(m)}`),
      // Low with the working set fitting: the prompt's head changes between turns (README).
      ...(m.history_read_from_cache === null ? [] :
        [badge(`history read from cache ${fmtPct(m.history_read_from_cache)}${gatewayOnly(m)}`,
               m.history_read_from_cache < 0.5 ? 'off' : '')]),
      ...(m.inline_system_as_user ?
        [badge(`inline system messages as user · ${fmtInt(m.inline_system_rewrites)} requests`)] : []),
      ...this.keyBadges(m.key_sources, badge));
    this.affinityButton.textContent = m.affinity ? 'Turn affinity off' : 'Turn affinity on';
    this.affinityButton.dataset.affinity = m.affinity ? 'on' : 'off';
    if (document.activeElement !== this.overflowInput && !this.overflowEdited) this.overflowInput.value = m.overflow_limit;
    this.renderPolicies(m.policies || [m.policy], m.policy);
    this.renderAdmission(m.admission || 'off');
  }

  // The usual modes, and the one in effect if it is another (reserve:3:0.5, say).
  renderAdmission(current) {
    const modes = ADMISSION_MODES.includes(current) ? ADMISSION_MODES : [...ADMISSION_MODES, current];
    if (this.admissionSelect.dataset.modes !== modes.join(',')) {
      this.admissionSelect.replaceChildren(...modes.map((n) => el('option', {value: n}, n)));
      this.admissionSelect.dataset.modes = modes.join(',');
    }
    if (document.activeElement !== this.admissionSelect) this.admissionSelect.value = current;
  }

  // The policies PATCH takes by name, and the one in effect if it is another form
  // (sglang-cache-aware:cli, warden:tpr=N).
  renderPolicies(listed, current) {
    const names = listed.includes(current) ? listed : [...listed, current];
    if (this.policySelect.dataset.names !== names.join(',')) {
      this.policySelect.replaceChildren(...names.map((n) => el('option', {value: n}, n)));
      this.policySelect.dataset.names = names.join(',');
    }
    if (document.activeElement !== this.policySelect) this.policySelect.value = current;
  }

  // Where requests' session keys came from: unkeyed requests are placed by load and lose affinity.
  keyBadges(sources, badge) {
    const total = Object.values(sources || {}).reduce((a, b) => a + b, 0);
    if (!total) return [];
    const share = (n) => fmtPct(n / total);
    const text = `session key on ${share(total - sources.none)} of requests` +
      (sources.opening ? ` (${share(sources.opening)} by their opening)` : '');
    return [badge(text, sources.none > 0.1 * total ? 'off' : '')];
  }

  // Over the cache by the rule of thumb alone is "may not fit" (amber): the window counts
  // conversations that just ended. Red once the replicas show it too: turns reading little of
  // their history, or a cache over its own count nearly full.
  renderWorkingSet(ws, admission, m) {
    if (gatewayOnly(m) && ws.recent_conversations === 0) {
      // vLLM's balancer places every turn: the gateway does not see where conversations run.
      this.workingSet.classList.remove('warning', 'caution');
      this.workingSet.replaceChildren(el('h2', {}, 'Working set'), el('div', {class: 'muted'},
        'Not counted while vLLM\'s balancer places the requests (affinity off): the gateway does not see ' +
        'which replica a conversation\'s turns run on. The replicas\' KV cache in use is in the table.'));
      return;
    }
    const ratio = ws.ratio === null ? 0 : ws.ratio;
    // Red holds for some refreshes while the count still says over: a cache's use at a moment
    // crosses 95 % and back every few seconds, and the card flipped red and amber with it.
    const state = workingSetState(m);
    this.redFor = state === 'warning' ? WARNING_HOLD : state === 'caution' ? Math.max(0, (this.redFor || 0) - 1) : 0;
    const evicting = state === 'warning' || this.redFor > 0;
    this.workingSet.classList.toggle('warning', evicting);
    this.workingSet.classList.toggle('caution', !ws.fits && !evicting);
    const bar = el('div', {class: 'bar' + (ws.fits ? '' : ' over')}, el('span', {style: `width:${Math.min(100, 100 * ratio)}%`}));
    const going = `${plural(ws.recent_conversations, 'conversation')} going on (seen in the last ${fmtDuration(ws.recent_window_s)}` +
      `${gatewayOnly(m) ? ', of those the gateway placed' : ''})`;
    // (healthy_replicas: absent from a gateway of an earlier version.)
    const noneInService = ws.healthy_replicas === 0;
    const text = noneInService
      ? `${going}; no replica is in service, so no KV cache holds them.`
      : ws.kv_cache_tokens
      ? `${going} × their context = ${fmtK(ws.recent_context_tokens)} tokens, ` +
        `against ${fmtK(ws.kv_cache_tokens)} tokens of KV cache (${(100 * ratio).toFixed(0)} %).`
      : `${going}; the replicas have not published their KV-cache size yet.`;
    const idle = ws.active_conversations - ws.recent_conversations;
    const children = [el('h2', {}, 'Working set'), el('div', {}, text), bar];
    if (idle > 0) {
      children.push(el('div', {class: 'muted'}, `${plural(idle, 'more conversation')} seen within the idle timeout ` +
        `(${fmtDuration(10 * ws.recent_window_s)}) keep their homes; their history stays cached only while there is room.`));
    }
    // vLLM's CPU offloading: its cache config names the host memory (--kv-offloading-size), and its
    // engines publish what they read back from there.
    const replicas = m.replicas || [];
    const sizes = [...new Set(replicas.map((r) => r.kv_offloading_gib).filter((g) => typeof g === 'number'))];
    const offloading = sizes.length > 0 || replicas.some((r) => typeof r.external_prefix_hit_rate === 'number');
    if (offloading) {
      const size = sizes.length === 1 ? `, ${fmtGib(sizes[0])} an engine`
        : sizes.length > 1 ? `, ${fmtGib(Math.min(...sizes))} to ${fmtGib(Math.max(...sizes))} an engine` : '';
      children.push(el('div', {class: 'muted'}, `These replicas keep prompts in host memory too (vLLM's CPU offloading${size}): ` +
        'a history evicted from a GPU is read back from there, on its own replica, while it fits.'));
    }
    if (!ws.fits && !noneInService) {
      children.push(el('p', {}, el('strong', {}, evicting ? 'The conversations going on no longer fit in the KV cache: '
                                                        : 'The conversations seen lately may not fit in the KV cache: '),
        ws.replicas_over ? `${plural(ws.replicas_over, 'replica')} ${ws.replicas_over === 1 ? 'holds' : 'hold'} ` +
          'more of their context than its cache; ' : '',
        (evicting ? 'they evict each other, and prefix hits fall. '
                  : 'if they all go on, they will evict each other and prefix hits will fall (the count includes ' +
                    'conversations that have just ended; the replicas\' caches do not show it yet). ') +
        'Fewer concurrent sessions, or more replicas' +
        (offloading ? '' : '; or host memory for the replicas\' caches (vLLM\'s --kv-offloading-size), where a ' +
                           'history evicted from a GPU survives on its own replica') +
        (admission === 'off' || !admission
          ? '; or admission at the gateway (admission: recent:4), which keeps recently active conversations ' +
            'cached: more output and a lower median, paid for by new conversations waiting longer.'
          : '.')));
    }
    this.workingSet.replaceChildren(...children);
  }

  renderTable(m) {
    const rows = m.replicas.map((r) => {
      const row = el('tr', {class: 'replica', 'data-index': String(r.index)});
      for (const [, f, cls] of COLUMNS) row.append(el('td', cls ? {class: cls} : {}, f(r)));
      row.children[0].title = row.children[1].title = r.url + (r.rank !== null ? ' · rank ' + r.rank : '');
      row.children[2].className = 'health ' + (!r.healthy ? 'unhealthy' : r.draining ? 'draining' : 'healthy');
      if (!r.healthy) row.classList.add('unhealthy');
      if (r.health_problem) row.children[2].title = r.health_problem;  // what its health check met
      // Draining: no more requests go there (before a restart, say); what it runs finishes.
      row.append(el('td', {}, el('button', {
        class: 'drain', title: r.draining ? 'Route requests to this replica again' :
          'Send no more requests here; the ones it runs finish, its conversations move',
        'aria-label': `${r.draining ? 'Resume' : 'Drain'} replica ${r.index}`,
        onclick: () => this.setDraining(r.index, !r.draining)}, r.draining ? 'Resume' : 'Drain')));
      if (r.draining) row.classList.add('draining');
      return row;
    });
    // Requests vLLM's own balancer placed (affinity off on a data-parallel server): in the total.
    const engine = m.engine_balanced;
    if (engine && engine.requests > 0) {
      const cells = COLUMNS.map(() => '');
      cells[0] = 'engine';
      cells[1] = 'vLLM\'s balancer';  // (short: the URL column keeps its width; the row's title says more)
      cells[3] = fmtInt(engine.requests);
      // (On a phone the Requests column gives way: the count shows where vLLM's balancer has no health.)
      cells[2] = el('span', {class: 'phone-only'}, `${fmtInt(engine.requests)} request${engine.requests === 1 ? '' : 's'}`);
      const row = el('tr', {class: 'engine-row', title: 'requests placed by vLLM\'s own balancer'},
        ...cells.map((c, i) => el('td', i === 1 ? {class: 'url'} : {}, c)), el('td', {}, ''));
      rows.push(row);
    }
    // The rows are built anew: a button that had the keyboard's focus gets it back.
    const focused = this.tbody.contains(document.activeElement) ? document.activeElement.closest('tr') : null;
    const focusedIndex = focused ? focused.getAttribute('data-index') : null;
    this.tbody.replaceChildren(...rows);
    if (focusedIndex !== null) {
      const again = this.tbody.querySelector(`tr[data-index="${focusedIndex}"] button`);
      if (again) again.focus({preventScroll: true});  // (not scrolled into view every refresh)
    }
    this.showScrollHint();
    const t = m.totals;
    const sum = (field) => m.replicas.reduce((a, r) => a + (r[field] || 0), 0);
    this.tfoot.replaceChildren(el('tr', {},
      el('td', {}, 'All'), el('td', {class: 'url'}, ''), el('td', {}, ''),
      el('td', {id: 'total-requests'}, fmtInt(t.requests)),
      el('td', {}, fmtInt(m.replicas.reduce((a, r) => a + r.new, 0))),
      el('td', {id: 'total-sticky', title: 'of the turns of conversations already placed, the share that went to ' +
        'their home replica: sticky / (sticky + overflow + re-homed)'},
        `${fmtInt(t.sticky)} · ${fmtPct(t.sticky_share)}`),
      el('td', {}, fmtInt(m.replicas.reduce((a, r) => a + r.overflow, 0))),
      el('td', {}, fmtInt(sum('rehomed'))),
      el('td', {}, fmtInt(m.replicas.reduce((a, r) => a + r.balanced, 0))),
      el('td', {}, fmtInt(sumKnown(m.replicas.map((r) => r.running)))),
      el('td', {}, fmtInt(sumKnown(m.replicas.map((r) => r.waiting)))),
      // The rows' hit rates are the engines' counters; the total is the share of prompt tokens the
      // replicas' usage reported as read from cache.
      el('td', {}, ''), el('td', {id: 'total-cached', title: 'prompt tokens read from the prefix cache, as the replicas\' usage reported them'},
        t.cached_share === null ? '–' : `${fmtPct(t.cached_share)} of tokens`), activeTotal(m),
      el('td', {}, ''), el('td', {}, '')));
  }

  chartSize() { return {width: Math.max(280, this.chartBox.clientWidth), height: window.innerWidth < 600 ? 220 : 300}; }

  // Stacked areas: every replica's cached tokens/s, then every replica's computed tokens/s on top.
  // The chart knows the tokens since `h.since_unix`: the gateway's start, or the hour before a
  // restart as its state file kept it.
  renderChart(h, replicas, startedUnix) {
    this.share.textContent = fmtPct(h.cached_share);
    const since = typeof h.since_unix === 'number' ? h.since_unix : startedUnix;
    const young = typeof since === 'number' && typeof h.now_unix === 'number' && h.now_unix - since < 3600;
    const kept = typeof startedUnix === 'number' && since < startedUnix - 0.01;
    this.shareOf.textContent = !young ? 'of the hour\'s prompt tokens were read from cache'
      : kept ? `of the prompt tokens since ${fmtTime(since)} (kept across the gateway's restart at ${fmtTime(startedUnix)}) were read from cache`
      : `of the prompt tokens since the gateway started (${fmtTime(startedUnix)}) were read from cache`;
    // (Not while the chart knows less than that span: it would be the headline again, labelled as
    // a span it does not cover.)
    const short = typeof h.now_unix === 'number' && typeof since === 'number' && h.now_unix - since < RECENT_SHARE_S;
    const recent = short ? null : recentCachedShare(h, RECENT_SHARE_S);
    this.shareRecent.textContent = recent === null ? ''
      : ` · last ${fmtDuration(RECENT_SHARE_S)}: ${fmtPct(recent)}`;
    const {xs, layers, rates} = chartLayers(h, replicas, since);
    const stacked = [];
    let acc = new Array(xs.length).fill(0);
    for (const layer of layers) {
      acc = acc.map((v, i) => layer.rates[i] === null ? null : v + layer.rates[i]);
      stacked.push(acc.slice());
    }
    // Draw the tallest stack first: each layer's fill covers the ones below it.
    const order = layers.map((_, i) => i).reverse();
    // Each bucket is a step over its own ten seconds (a line between bucket starts drew a change's
    // effect up to a bucket and a half before its marker): one more point closes the last step,
    // at the bucket's end or, while it fills, now.
    const last = xs.length - 1;
    const closing = last < 0 ? [] : [Math.min(xs[last] + h.bucket_s, h.now_unix ?? Infinity)];
    const data = [[...xs, ...closing], ...order.map((i) => [...stacked[i], ...(last < 0 ? [] : [stacked[i][last]])])];
    this.latest = {layers, rates, xs};
    this.bucketS = h.bucket_s;
    // A new set of layers (engine-placed traffic starting or ageing out of the hour) needs a new chart.
    const key = layers.map((l) => l.label).join('|');
    if (this.chart && this.chartKey !== key) {
      this.chart.destroy();
      this.chart = null;
    }
    if (!this.chart) {
      this.chartKey = key;
      this.chart = new uPlot(Object.assign(this.chartSize(), {
        series: [{}, ...order.map((i) => ({label: layers[i].label, stroke: layers[i].stroke, fill: layers[i].fill,
                                            width: 1, points: {show: false}, paths: uPlot.paths.stepped({align: 1})}))],
        // Ticks on whole minutes, labelled hours and minutes.
        // The page's colours (its dark scheme too) for the labels and the grid.
        axes: [{space: 70, incrs: [60, 120, 300, 600, 900, 1800, 3600], values: (u, splits) => splits.map((t) => fmtTime(t)),
                ...axisColors()},
               {label: 'prompt tokens/s', size: 60, values: (u, splits) => splits.map(fmtCompact), ...axisColors()}],
        scales: {x: {time: true}},
        cursor: {points: {show: false}},
        legend: {show: false},
        hooks: {setCursor: [(u) => this.renderLegend(u.cursor.idx)], draw: [(u) => this.drawChanges(u)]},
      }), data, this.chartBox);
    } else {
      this.chart.setData(data);
    }
    this.renderLegend(this.chart.cursor.idx);
  }

  // A dashed line on the chart at each change, labelled with its number in the list below (changes
  // a pixel apart share a line).
  drawChanges(u) {
    const css = getComputedStyle(document.documentElement);
    const color = css.getPropertyValue('--accent').trim() || '#2f5bd3';
    const background = css.getPropertyValue('--card').trim() || '#fff';
    const {min, max} = u.scales.x;
    const lines = new Map();  // x in pixels -> the numbers drawn there
    this.changes.forEach((c, i) => {
      // The last point closes the bucket still filling (now): a change just after the last
      // refresh is drawn there.
      if (c.unix < min || c.unix > max + (this.bucketS || 0)) return;
      const x = Math.round(u.valToPos(Math.min(c.unix, max), 'x', true));
      lines.set(x, [...(lines.get(x) || []), i + 1]);
    });
    const {ctx} = u;
    const {left, top, width, height} = u.bbox;
    const px = devicePixelRatio;
    ctx.save();
    ctx.lineWidth = Math.max(1, px);
    ctx.font = `600 ${11 * px}px system-ui, sans-serif`;
    ctx.textBaseline = 'top';
    ctx.textAlign = 'left';  // (uPlot leaves it right-aligned)
    const rows = [];  // per row of labels, the [from, to] pixels taken: close labels stack
    for (const [x, numbers] of lines) {
      ctx.strokeStyle = color;
      ctx.setLineDash([4 * px, 3 * px]);
      ctx.beginPath();
      ctx.moveTo(x + 0.5, top);
      ctx.lineTo(x + 0.5, top + height);
      ctx.stroke();
      // The label on the line's right, or its left near the chart's right edge, on the card's colour.
      const label = numbers.join(',');
      const w = ctx.measureText(label).width + 6 * px;
      const at = x + w + 2 * px > left + width ? x - w - 2 * px : x + 2 * px;
      let row = rows.findIndex((taken) => taken.every(([a, b]) => at + w < a || at > b));
      if (row < 0) row = rows.push([]) - 1;
      rows[row].push([at, at + w]);
      const y = top + (2 + 16 * row) * px;
      ctx.fillStyle = background;
      ctx.fillRect(at, y, w, 14 * px);
      ctx.fillStyle = color;
      ctx.fillText(label, at + 3 * px, y + px);
    }
    ctx.restore();
  }

  // The changes of the chart's hour, newest first, numbered as the chart's markers.
  renderChanges() {
    const items = this.changes.map((c, i) => el('li', {value: String(i + 1)},
      el('span', {class: 'when'}, fmtTime(c.unix, true)), ' ', c.what, el('span', {class: 'muted'}, ` · ${c.by}`)));
    this.changesList.replaceChildren(...items.reverse());
    this.changesList.hidden = items.length === 0;
  }

  // The chart's legend, one line per replica in index order: its cached and computed tokens/s at
  // the bucket under the cursor, or the latest one.
  renderLegend(idx) {
    const {layers, rates, xs} = this.latest;
    // (The closing point repeats the last bucket.)
    const at = idx === null || idx === undefined ? xs.length - 1 : Math.min(idx, xs.length - 1);
    const value = (i) => at >= 0 && rates[i][at] !== null ? fmtInt(rates[i][at]) + '/s' : '–';
    const swatch = (color) => el('span', {class: 'swatch', style: `background:${color}`});
    const rows = [];
    layers.forEach((layer, i) => {
      if (layer.kind !== 'cached') return;
      const j = layers.findIndex((l) => l.kind === 'computed' && l.owner === layer.owner);
      rows.push(el('tr', {},
        el('th', {}, layer.owner),
        el('td', {}, swatch(layer.fill), value(i)),
        el('td', {}, swatch(layers[j].fill), value(j))));
    });
    const when = at < 0 ? 'no tokens yet' : idx === null || idx === undefined ? `latest (${fmtTime(xs[at], true)})` : fmtTime(xs[at], true);
    this.legend.replaceChildren(el('table', {},
      el('thead', {}, el('tr', {}, el('th', {class: 'when'}, when), el('th', {}, 'cached'), el('th', {}, 'computed'))),
      el('tbody', {}, ...rows)));
  }

  // Whether the gateway took the change.
  patch(what, change) {
    // None while the page is stale (found by review: the keyboard got past the greyed-out
    // controls). (One while another is under way goes too: the gateway takes them in turn.)
    if (document.body.classList.contains('stale')) {
      return this.refresh().catch(() => {});  // (a control moved meanwhile shows the gateway's value)
    }
    // The controls wait meanwhile, and say so: a change takes a round trip (seconds when the
    // gateway is slow to answer).
    document.body.classList.add('busy');
    setStatus('sending the change…');
    return act(what, async () => {
      await api('/warden/v1/models/' + encodeURIComponent(this.name),
        {method: 'PATCH', body: JSON.stringify(change), headers: {'X-Warden-Via': 'panel'}});
      // Taken: a refresh that fails now is no refusal (the next one shows the change).
      await this.refresh().catch(() => {});
    }).finally(() => document.body.classList.remove('busy'));
  }

  toggleAffinity() {
    if (!this.model) return;  // nothing shown yet: nothing to switch
    if (this.model.affinity && !confirm(`Turn affinity off for ${this.name}? Requests will be placed by load ` +
        'alone: most turns will compute their history again (prefix hits fall) until it is back on.')) return;
    return this.patch('Affinity not changed', {affinity: !this.model.affinity});
  }

  setDraining(index, draining) {
    if (!this.model) return;
    const others = this.model.replicas.filter((r) => r.index !== index && r.healthy && !r.draining).length;
    if (draining && !others && !confirm(`No other replica of ${this.name} is in service: every request to it ` +
        `will be refused (503) until one is back. Drain replica ${index} anyway?`)) return;
    return this.patch(draining ? 'Replica not drained' : 'Replica not resumed', {replicas: [{index, draining}]});
  }

  // (A change event is the user's choice of another policy than the one shown.)
  setPolicy(name) {
    if (!this.model) return;
    if (!confirm(`Route ${this.name}'s requests with the policy ${name} from now on?`)) {
      this.policySelect.value = this.model.policy;
      return;
    }
    return this.patch('Policy not changed', {policy: name}).then((done) => {
      if (!done) this.policySelect.value = this.model.policy;
    });
  }

  setAdmission(mode) {
    if (!this.model) return;
    if (!confirm(`Admission ${mode} for ${this.name} from now on?` +
        (mode === 'off' ? ' Requests held at the gateway are let in at once.' : ''))) {
      this.admissionSelect.value = this.model.admission;
      return;
    }
    return this.patch('Admission not changed', {admission: mode}).then((done) => {
      if (!done) this.admissionSelect.value = this.model.admission;
    });
  }

  // A value refused (here or by the gateway) is said, then the field shows the limit in effect
  // again: left as typed, it would read as the model's limit.
  setOverflow(value) {
    const showLimitInEffect = () => {
      this.overflowEdited = false;
      if (this.model) this.overflowInput.value = this.model.overflow_limit;
    };
    if (value !== 'auto' && !(Number.isInteger(value) && value >= 1)) {
      alert('The overflow limit is a whole number from 1, or auto.');
      showLimitInEffect();
      return;
    }
    return this.patch('Overflow limit not set', {overflow_limit: value}).then((done) => {
      if (done) this.overflowEdited = false; else showLimitInEffect();
    });
  }
}

async function main() {
  const match = location.pathname.match(/^\/panel\/models\/([^/]+)\/?$/);
  let name = null;
  try {
    name = match ? decodeURIComponent(match[1]) : null;
  } catch (e) {
    name = match[1];  // a malformed %-escape: asked for as it is, the gateway says no such model
  }
  const page = match ? new ModelPage(name) : null;
  // When the admin API stops answering, the page says since when and greys out what it shows,
  // so that old figures (a replica's green check) are not taken for current ones. A refusal is
  // said as one: the gateway is there.
  let lastUpdate = null, failingSince = null;
  const tick = async () => {
    try {
      if (page) await page.refresh(); else await renderIndex();
      lastUpdate = new Date();
      failingSince = null;
      document.body.classList.remove('stale');
      setControlsDisabled(false);
      return REFRESH_MS;
    } catch (e) {
      failingSince = failingSince || new Date();
      document.body.classList.add('stale');
      setControlsDisabled(true);
      const since = lastUpdate ? `; the figures shown are from ${lastUpdate.toLocaleTimeString()}` : '';
      // The address names no model (the gateway's text is not repeated: the address is anyone's
      // to write). Asked again now and then: a config reload may add it.
      if (page && e.status === 404) {
        app.replaceChildren(el('div', {class: 'card'}, el('h1', {}, 'No such model'),
          el('p', {}, 'This gateway serves no model of that name. ', el('a', {href: '/panel'}, 'The models it serves'))));
        document.body.classList.remove('stale');
        setStatus('no such model', true);
        return NOT_FOUND_REFRESH_MS;
      }
      // The token declined: said where the page would be, with a way to give it.
      if (e instanceof Refusal && e.status === 401) {
        app.replaceChildren(el('div', {class: 'card', id: 'token-needed'}, el('h1', {}, 'The admin token is needed'),
          el('p', {}, 'This gateway\'s admin API (what this page shows) asks for its admin token ' +
            '(admin_token in its config).'),
          el('button', {class: 'primary', id: 'give-token', onclick: () => location.reload()},
            'Give the admin token')));
        document.body.classList.remove('stale');
        setStatus('the admin token is needed', true);
        return 0;
      }
      const what = e instanceof Refusal ? `the admin API refuses: ${e.message}`
                                        : `cannot reach the admin API since ${failingSince.toLocaleTimeString()} (${e.message})`;
      setStatus(what + since, true);
      // A token the operator would not give: asking again every two seconds changes nothing.
      return e instanceof Refusal && e.status === 401 ? 0 : REFRESH_MS;
    }
  };
  // One refresh at a time, the next a while after the last ended: a slow answer is never
  // overtaken by a later one.
  const loop = async () => {
    const wait = await tick();
    if (wait) setTimeout(loop, wait);
  };
  loop();
}

main();
