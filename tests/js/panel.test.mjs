// The replica panel in a real browser (Debian's chromium, driven by playwright-core), with
// simulated traffic flowing through `warden serve --demo`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startWarden, stopWarden } from './support.mjs';

const MODEL = 'qwen3-4b-dp4';
let gateway, base, browser, traffic = true;

const words = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix}${i}`).join(' ');

// Four sessions at a time taking turns until the test ends, each turn ending with a system message as
// Claude Code's do after a tool result (passed on as a user message: --inline-system-as-user).
// A session ends after 40 turns and another takes its place, as in the bench (a conversation
// that went on would outgrow the model's context, and its turns would all be refused).
async function converse(name) {
  for (let session = 0; traffic; ++session) await converseOnce(`${name}${session}`, 40);
}

async function converseOnce(id, turns) {
  const reminder = (turn) => ({ role: 'system', content: `<total_tokens>${900000 - turn} tokens left</total_tokens>` });
  const messages = [{ role: 'user', content: words(id, 400) }, reminder(0)];
  for (let turn = 0; traffic && turn < turns; ++turn) {
    const res = await fetch(`${base}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-claude-code-session-id': id },
      body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 24, messages }),
    }).catch(() => null);
    if (!res || !res.ok) { await new Promise((r) => setTimeout(r, 50)); continue; }
    const reply = await res.json();
    messages.push({ role: 'assistant', content: reply.content[0].text });
    messages.push({ role: 'user', content: words(`${id}t${turn}`, 40) }, reminder(turn + 1));
  }
}

before(async () => {
  gateway = await startWarden(['serve', '--demo', '--time-scale', '50', '--listen', '127.0.0.1:0',
                              '--admission', 'recent:4', '--inline-system-as-user', 'on']);
  base = `http://127.0.0.1:${gateway.ports[0]}`;
  for (const id of ['alpha', 'beta', 'gamma', 'delta']) converse(id);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  traffic = false;
  if (browser) await browser.close();
  await stopWarden(gateway.child);
});

const totalRequests = async (page) => Number((await page.textContent('#total-requests')).replace(/,/g, ''));

test('the model page shows one row per replica, live counters, and switches affinity', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  assert.equal(await page.locator('tr.replica').count(), 4);
  assert.match(await page.textContent('.badges'), /affinity on/);
  // The demo's replicas say what they are.
  assert.match(await page.textContent('.badge.sim'), /SIMULATED replicas \(warden sim, profile a4000-qwen3-4b, time x50\)/);
  assert.match(await page.textContent('.badges'), /admission recent:4/);
  await page.waitForFunction(() => document.querySelector('.badges').textContent.includes('session key on 100.0 % of requests'));
  // Each conversation alone on its replica: every turn reads its whole history from the cache.
  await page.waitForFunction(() => document.querySelector('.badges').textContent.includes('history read from cache 100.0 %'));
  await page.waitForFunction(() => /inline system messages as user · [1-9]/.test(document.querySelector('.badges').textContent));

  const first = await totalRequests(page);
  await page.waitForFunction((n) => Number(document.querySelector('#total-requests').textContent.replace(/,/g, '')) > n,
    first, { timeout: 20000 });
  const second = await totalRequests(page);
  assert.ok(second > first, `requests grew: ${first} -> ${second}`);
  await page.waitForFunction(() => document.querySelector('#cached-share').textContent.includes('%'), null, { timeout: 20000 });
  // Beside the share since the start, the share of the last minutes (what the cache does now),
  // once the chart knows that span: a gateway younger than it shows none (it would be the
  // headline again under another name).
  assert.equal(await page.textContent('#cached-share-recent'), '');
  await withModel(page, (model) => { model.history.since_unix -= 600; });
  await page.waitForFunction(() => document.querySelector('#cached-share-recent').textContent !== '',
    null, { timeout: 10000 });
  assert.match(await page.textContent('#cached-share-recent'), /^ · last 5 min: \d+\.\d %$/);
  await page.unroute(new RegExp(`/warden/v1/models/${MODEL}$`));

  // The chart draws the traffic: the legend's latest rates (the bucket still filling counts once
  // it is half full) are not all zero.
  await page.waitForFunction(() => [...document.querySelectorAll('#chart-legend td')].some((td) => /^[1-9][\d,]*\/s$/.test(td.textContent)),
    null, { timeout: 20000 });
  const dir = process.env.WARDEN_SCREENSHOT_DIR || '.';
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: `${dir}/panel-model.png`, fullPage: true });

  // Turning affinity off asks first, saying what it costs.
  const askedOff = new Promise((resolve) => page.once('dialog', async (d) => { resolve(d.message()); await d.accept(); }));
  await page.click('#affinity-toggle');
  assert.match(await askedOff, /Turn affinity off for qwen3-4b-dp4\? .*prefix hits fall/);
  await page.waitForFunction(() => document.querySelector('#affinity-toggle').dataset.affinity === 'off');
  const api = await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json();
  assert.equal(api.affinity, false);
  // vLLM's own balancer now places the requests: the open page's chart gains their layer.
  await page.waitForFunction(() => (document.querySelector('#chart-legend')?.textContent || '').includes('engine-placed'),
    null, { timeout: 20000 });
  // One line per replica in index order, then the engine's, each with its cached and computed rates.
  const legend = await page.$$eval('#chart-legend tbody tr', (rows) => rows.map((r) => [...r.children].map((c) => c.textContent)));
  assert.deepEqual(legend.map((r) => r[0]), ['r0', 'r1', 'r2', 'r3', 'engine-placed']);
  for (const r of legend) assert.match(`${r[1]} ${r[2]}`, /^[\d,]+\/s [\d,]+\/s$/);
  // The table gains the engine's row, and its total is the sum of its rows.
  await page.waitForSelector('tr.engine-row', { timeout: 20000 });
  const sums = await page.evaluate(() => {
    const n = (text) => Number(text.replace(/,/g, ''));
    const rows = [...document.querySelectorAll('#replicas tbody tr')];
    return [rows.reduce((a, r) => a + n(r.children[3].textContent), 0),
            n(document.querySelector('#total-requests').textContent)];
  });
  assert.equal(sums[0], sums[1]);
  assert.match(await page.textContent('#total-cached'), /% of tokens/);
  await page.click('#affinity-toggle');
  await page.waitForFunction(() => document.querySelector('#affinity-toggle').dataset.affinity === 'on');
  assert.equal((await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json()).affinity, true);

  await page.fill('#overflow-input', '3');
  await page.click('#overflow-set');
  await page.waitForFunction(() => document.querySelector('.badges').textContent.includes('overflow limit 3'));
  // Set here, not in the config: said, with the config's value.
  await page.waitForFunction(() => document.querySelector('.badges').textContent.includes('changed at runtime: overflow limit 3 (config: auto)'));
  assert.equal((await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json()).overflow_limit, 3);
  await page.click('#overflow-auto');
  await page.waitForFunction(() => document.querySelector('.badges').textContent.includes('overflow limit 8 (auto)'));
  assert.doesNotMatch(await page.textContent('.badges'), /changed at runtime/);
  // Each change is listed under the chart, newest first, numbered as the chart's markers.
  await page.waitForFunction(() => (document.querySelector('#changes')?.textContent || '').includes('overflow limit 8 (auto)'));
  const changes = await page.$$eval('#changes li', (items) => items.map((li) =>
    [li.value, li.textContent.slice(li.querySelector('.when').textContent.length + 1)]));
  // (Made here: said to be the panel's, apart from other clients of the admin API.)
  const byOperator = changes.filter(([, text]) => text.endsWith(' · panel'));
  assert.deepEqual(byOperator.map(([, text]) => text), [
    'overflow limit 8 (auto) · panel', 'overflow limit 3 · panel', 'affinity on · panel',
    'affinity off · panel']);
  assert.deepEqual(changes.map(([n]) => n), changes.map((_, i) => changes.length - i));
  // A value the gateway refuses is said, with the gateway's reason, not dropped in silence.
  const refusal = new Promise((resolve) => page.once('dialog', async (d) => { resolve(d.message()); await d.accept(); }));
  await page.fill('#overflow-input', '2000000');
  await page.press('#overflow-input', 'Enter');
  assert.match(await refusal, /Overflow limit not set: .*1048576/);
  assert.equal((await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json()).overflow_limit, 8);
  // ...and the field shows the limit in effect again, not the value refused.
  await page.waitForFunction(() => document.querySelector('#overflow-input').value === '8');
  const localRefusal = new Promise((resolve) => page.once('dialog', async (d) => { resolve(d.message()); await d.accept(); }));
  await page.fill('#overflow-input', '0');
  await page.press('#overflow-input', 'Enter');
  assert.match(await localRefusal, /whole number from 1/);
  await page.waitForFunction(() => document.querySelector('#overflow-input').value === '8');

  // The policy, chosen from the gateway's list, applies at once; and back.
  const options = await page.$$eval('#policy-select option', (os) => os.map((o) => o.value));
  assert.ok(options.includes('round-robin') && options.includes('warden-seed'), options.join());
  assert.equal(await page.inputValue('#policy-select'), 'warden-seed');
  const policyBecomes = async (name) => {
    for (let i = 0; i < 100; ++i) {
      if ((await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json()).policy === name) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.fail(`the policy did not become ${name}`);
  };
  // A choice from a list asks before it applies: one declined changes nothing.
  const answer = (accept) => new Promise((resolve) => page.once('dialog', async (d) => {
    resolve(d.message());
    if (accept) await d.accept(); else await d.dismiss();
  }));
  let asked = answer(false);
  await page.selectOption('#policy-select', 'round-robin');
  assert.match(await asked, /policy round-robin from now on\?/);
  await page.waitForFunction(() => document.querySelector('#policy-select').value === 'warden-seed');
  assert.equal((await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json()).policy, 'warden-seed');
  asked = answer(true);
  await page.selectOption('#policy-select', 'round-robin');
  await asked;
  await policyBecomes('round-robin');
  asked = answer(true);
  await page.selectOption('#policy-select', 'warden-seed');
  await asked;
  await policyBecomes('warden-seed');

  // Admission likewise: off, then back to the demo's.
  const admissionBecomes = async (mode) => {
    for (let i = 0; i < 100; ++i) {
      if ((await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json()).admission === mode) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.fail(`admission did not become ${mode}`);
  };
  assert.equal(await page.inputValue('#admission-select'), 'recent:4');
  asked = answer(true);
  await page.selectOption('#admission-select', 'off');
  assert.match(await asked, /Admission off for qwen3-4b-dp4 from now on\? Requests held at the gateway are let in at once/);
  await admissionBecomes('off');
  await page.waitForFunction(() => !document.querySelector('.badges').textContent.includes('admission recent:4'));
  asked = answer(true);
  await page.selectOption('#admission-select', 'recent:4');
  await asked;
  await admissionBecomes('recent:4');

  // Draining a replica from its row, then taking it back.
  const replica = async (i) => (await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json()).replicas[i];
  await page.click('tr.replica[data-index="2"] button.drain');
  await page.waitForSelector('tr.replica.draining[data-index="2"]');
  assert.match(await page.textContent('tr.replica[data-index="2"]'), /draining · (idle|\d+ left)/);
  assert.equal(await page.textContent('tr.replica[data-index="2"] button.drain'), 'Resume');
  assert.equal((await replica(2)).draining, true);
  assert.equal((await replica(1)).draining, false);
  await page.click('tr.replica[data-index="2"] button.drain');
  await page.waitForFunction(() => !document.querySelector('tr.replica[data-index="2"]').classList.contains('draining'));
  assert.equal((await replica(2)).draining, false);
});

test('the panel is readable on a phone', async () => {
  const page = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  // Requests vLLM's own balancer placed (affinity off) keep their count in view, where the
  // Requests column gives way (it was a blank row).
  await page.route(new RegExp(`/warden/v1/models/${MODEL}$`), async (route) => {
    const response = await route.fetch();
    const model = await response.json();
    model.engine_balanced = { ...model.engine_balanced, requests: 42 };
    await route.fulfill({ response, json: model });
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  await page.waitForSelector('tr.engine-row');
  assert.match(await page.$eval('tr.engine-row', (tr) => tr.innerText), /engine\s+42 requests/);
  await page.waitForSelector('#chart-legend tbody tr');  // the chart's legend, as wide as its entries
  const overflowing = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);
  assert.equal(overflowing, false, 'the page itself does not scroll sideways (the table does)');
  // The engine's figures come before how turns were placed: the KV cache's use in the first screen.
  const shown = await page.$$eval('#replicas thead th', (ths) => ths.filter((th) => th.offsetWidth > 0).map((th) => th.textContent));
  assert.ok(!shown.includes('Sticky') && !shown.includes('Requests'), shown.join('|'));
  const [kv, visible] = await page.$eval('#replicas thead th:nth-child(12)',
    (th) => [th.getBoundingClientRect().right, th.closest('.table-wrap').getBoundingClientRect().right]);
  assert.ok(kv <= visible, `the KV cache column ends at ${kv} px, the table's view at ${visible} px`);
  // A phone has no mouse to show a title: the figures' meanings open with a tap, hidden ones too.
  await page.tap('#figure-help summary');
  const help = await page.$eval('#figure-help', (d) => [d.open, d.textContent, d.getBoundingClientRect().right]);
  assert.equal(help[0], true);
  for (const term of ['stayed on replica', 'history read from cache', 'Prefix-cache hits', 'Sticky', 'Recent context / KV'])
    assert.ok(help[1].includes(term), `the help names ${term}`);
  assert.ok(help[2] <= 390, `the help ends at ${help[2]} px`);
  await page.screenshot({ path: `${process.env.WARDEN_SCREENSHOT_DIR || '.'}/panel-phone.png`, fullPage: true });
});

test('the index lists the models and a browser asking for / is sent to the panel', async () => {
  const page = await browser.newPage();
  await page.goto(`${base}/`);
  assert.match(page.url(), /\/panel$/);
  await page.waitForSelector('.models a');
  assert.equal(await page.textContent('.models a'), MODEL);
  assert.equal(await page.textContent('.models .badge.sim'), 'simulated replicas');
  // A replica down and a working set over the cache (its turns reading little of their history)
  // are flagged on the list itself, as on the model's page.
  await page.route(/\/warden\/v1\/models$/, async (route) => {
    const response = await route.fetch();
    const { models } = await response.json();
    models[0].replicas[1].healthy = false;
    models[0].working_set = { ...models[0].working_set, fits: false };
    models[0].history_read_from_cache = 0.3;
    await route.fulfill({ response, json: { models } });
  });
  await page.waitForFunction(() => document.querySelectorAll('.models .badge.off').length === 2);
  assert.match(await page.textContent('.models .card'), /1 replica unhealthy.*working set over the KV cache/);
});

test('with API keys, the index shows the usage of each client', async () => {
  const page = await browser.newPage();
  const empty = await (await fetch(`${base}/warden/v1/clients`)).json();
  assert.deepEqual(empty, { keys_required: false, unauthorized: 0, clients: [] });  // the demo has none
  await page.route(/\/warden\/v1\/clients$/, (route) => route.fulfill({
    json: { keys_required: true, unauthorized: 3, clients: [
      { name: 'alice', requests: 12, prompt_tokens: 90000, cached_prompt_tokens: 81000, computed_prompt_tokens: 9000, output_tokens: 2400,
        in_flight: 2, max_in_flight: 4, limited: 5, tokens_per_minute: 50000, budget_left: -1500, budget_limited: 7 },
      { name: 'key-2', requests: 0, prompt_tokens: 0, cached_prompt_tokens: 0, computed_prompt_tokens: 0, output_tokens: 0,
        in_flight: 0, max_in_flight: 0, limited: 0, tokens_per_minute: 0, budget_left: null, budget_limited: 0 }] },
  }));
  await page.goto(`${base}/panel`);
  await page.waitForSelector('#clients tr.client');
  assert.equal(await page.locator('#clients tr.client').count(), 2);
  const alice = await page.textContent('#clients tr.client');
  assert.match(alice, /alice/);
  assert.match(alice, /90\.0 K/);
  assert.match(alice, /90\.0 %/);
  assert.match(alice, /2 of 4 · 5 refused \(429\)/);
  assert.match(alice, /owes 1\.5 K of 50\.0 K · 7 refused \(429\)/);  // its tokens_per_minute
  assert.match(await page.textContent('#clients tr.client:nth-child(2)'), /none$/);
  assert.match(await page.textContent('#clients'), /3 requests refused/);
});

test('a gateway with an admin token is asked for it once, and the page then shows the model', async () => {
  const page = await browser.newPage();
  // The demo has no token: the admin API's answers are made to ask for one.
  await page.route(/\/warden\/v1\//, async (route) => {
    if (route.request().headers().authorization !== 'Bearer tok') {
      return route.fulfill({ status: 401, json: { error: { message: 'admin token required' } } });
    }
    return route.continue();
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  // Asked in a password field (a prompt() showed the token in clear).
  await page.waitForSelector('#token-dialog');
  assert.equal(await page.textContent('#token-dialog p'), 'This gateway needs its admin token:');
  assert.equal(await page.getAttribute('#token-input', 'type'), 'password');
  await page.fill('#token-input', 'tok');
  await page.press('#token-input', 'Enter');
  await page.waitForSelector('tr.replica');
  assert.equal(await page.locator('#token-dialog').count(), 0, 'asked once');
  assert.equal(await page.evaluate(() => localStorage.getItem('warden-admin-token')), 'tok');
});

test('a declined admin token leaves a card that asks for it again, not an empty page', async () => {
  const page = await browser.newPage();
  await page.route(/\/warden\/v1\//, (route) => route.fulfill({ status: 401, json: { error: { message: 'admin token required' } } }));
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('#token-dialog');
  await page.click('#token-cancel');
  await page.waitForSelector('#token-needed');
  assert.match(await page.textContent('#token-needed'), /The admin token is needed/);
  assert.equal(await page.textContent('#give-token'), 'Give the admin token');
});

test('peer gateways are shown, and one that does not answer is flagged', async () => {
  const page = await browser.newPage();
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  assert.doesNotMatch(await page.textContent('.badges'), /peers:/);  // the demo has none
  await page.route(/\/warden\/v1\/peers$/, (route) => route.fulfill({
    json: { instance: 'me', sync_interval_s: 0.2, homes_received: 4, peers: [
      { url: 'http://10.0.0.2:8080', instance: 'b', self: false, failures_in_a_row: 0, last_ok_unix: 1.5e9, last_error: '' },
      { url: 'http://10.0.0.3:8080', instance: '', self: false, failures_in_a_row: 3, last_ok_unix: null,
        last_error: 'no response: Connection refused' },
      { url: 'http://10.0.0.1:8080', instance: 'me', self: true, failures_in_a_row: 0, last_ok_unix: null, last_error: '' }] },
  }));
  await page.waitForFunction(() => document.querySelector('.badges').textContent.includes('peers: 1 of 2 answering'));
  const flagged = page.locator('.badge.off', { hasText: 'peers:' });
  assert.match(await flagged.getAttribute('title'), /10\.0\.0\.3:8080: no response: Connection refused/);
});

test('a working set over the KV cache is flagged, and admission suggested while it is off', async () => {
  const page = await browser.newPage();
  // The demo's four conversations fit: make the model's JSON say they do not, as in overload.
  await page.route(new RegExp(`/warden/v1/models/${MODEL}$`), async (route) => {
    if (route.request().method() !== 'GET') return route.continue();
    const response = await route.fetch();
    const model = await response.json();
    const ws = model.working_set;
    model.working_set = { ...ws, fits: false, replicas_over: 2, ratio: 1.4,
                          active_conversations: ws.recent_conversations + 5 };
    model.history_read_from_cache = 0.3;  // and the turns show it: they read little of their history
    model.admission = 'off';
    // Two replicas over their caches by the count, one of them at 150 %.
    model.replicas[0].kv_cache_tokens = 1000;
    model.replicas[0].recent_context_tokens = 1500;
    await route.fulfill({ response, json: model });
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('#working-set.warning');
  // Per replica, its recent context against its cache, in the bad colour when over.
  const cell = await page.$eval('tr.replica[data-index="0"] td:nth-child(15)', (td) =>
    [td.textContent, td.querySelector('.bad-count') !== null]);
  assert.deepEqual(cell, ['1.5 K / 1.0 K (150 %)', true]);
  const text = await page.textContent('#working-set');
  assert.match(text, /conversations? going on \(seen in the last [\d.]+ (s|min)\)/);
  assert.match(text, /no longer fit in the KV cache/);
  assert.match(text, /2 replicas hold more/);
  // Conversations idle past the window but within the idle timeout are said apart.
  assert.match(text, /5 more conversations seen within the idle timeout/);
  assert.match(text, /admission: recent:4/);
  assert.match(text, /--kv-offloading-size/);  // replicas without host memory for their caches
});

// With every replica out of service there is no cache to fit: the card says so, and gives no
// advice about sessions or admission.
test('a working set with no replica in service says no cache holds it', async () => {
  const page = await browser.newPage();
  await withModel(page, (model) => {
    model.working_set = { ...model.working_set, fits: false, healthy_replicas: 0, kv_cache_tokens: 0,
                          ratio: null, recent_conversations: 2, recent_context_tokens: 3000 };
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('#working-set.caution');
  const text = await page.textContent('#working-set');
  assert.match(text, /2 conversations going on .*; no replica is in service, so no KV cache holds them\./);
  assert.doesNotMatch(text, /may not fit|no longer fit|admission/);
});

// Replicas that read history back from host memory (vLLM's CPU offloading) are said to, with the
// memory their cache config names, and the advice no longer offers it; each row's hit rate says
// how much came from there.
test('replicas with CPU offloading are said to keep prompts in host memory', async () => {
  const page = await browser.newPage();
  await withModel(page, (model) => {
    model.working_set = { ...model.working_set, fits: false, replicas_over: 1, ratio: 2.01 };
    model.history_read_from_cache = 0.96;
    for (const r of model.replicas) {
      r.kv_cache_usage = 0.78;
      r.prefix_hit_rate = 0.3;
      r.external_prefix_hit_rate = 0.5;
      r.kv_offloading_gib = 16;
    }
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('#working-set.caution');
  const text = await page.textContent('#working-set');
  assert.match(text, /keep prompts in host memory too \(vLLM's CPU offloading, 16 GiB an engine\)/);
  assert.doesNotMatch(text, /--kv-offloading-size/);
  assert.match(await page.textContent('tr.replica[data-index="0"]'), /30\.0 % \+ 50\.0 % from CPU/);
});

// A replica lost re-homes its conversations: the turns that moved have their column, so a row's
// placements add up to its requests; conversations no replica is home to are counted apart.
test('re-homed turns have their column, and conversations without a home are counted apart', async () => {
  const page = await browser.newPage();
  await withModel(page, (model) => {
    model.replicas.forEach((r, i) => {
      Object.assign(r, { requests: 20 + i, new: 4, sticky: 10, overflow: 1, rehomed: 2 + i, balanced: 3,
                         active_conversations: 5 });
    });
    model.working_set = { ...model.working_set, active_conversations: 5 * model.replicas.length + 7 };
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  const heads = await page.$$eval('#replicas thead th', (ths) => ths.map((th) => th.textContent));
  const rehomed = heads.indexOf('Re-homed');
  assert.equal(heads[rehomed - 1], 'Overflow');
  const row = await page.$$eval('tr.replica[data-index="1"] td', (tds) => tds.map((td) => td.textContent));
  assert.equal(row[rehomed], '3');
  const placed = ['New', 'Sticky', 'Overflow', 'Re-homed', 'By load'].reduce((a, h) => a + Number(row[heads.indexOf(h)]), 0);
  assert.equal(placed, Number(row[heads.indexOf('Requests')]));
  const n = await page.$$eval('tr.replica', (rows) => rows.length);
  const footer = await page.$$eval('#replicas tfoot td', (tds) => tds.map((td) => td.textContent));
  assert.equal(Number(footer[rehomed]), Array.from({ length: n }, (_, i) => 2 + i).reduce((a, b) => a + b, 0));
  assert.equal(await page.textContent('#total-active'), `${5 * n} + 7 no home`);
});

// The rule of thumb alone (the window counts conversations that just ended) says "may": amber,
// not the red of caches the turns show evicting.
test('a working set over the KV cache by the count alone is a caution, not an alarm', async () => {
  const page = await browser.newPage();
  await withModel(page, (model) => {
    model.working_set = { ...model.working_set, fits: false, replicas_over: 1, ratio: 2.01 };
    model.history_read_from_cache = 0.96;
    for (const r of model.replicas) r.kv_cache_usage = 0.78;
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('#working-set.caution');
  assert.equal(await page.evaluate(() => document.querySelector('#working-set').classList.contains('warning')), false);
  assert.match(await page.textContent('#working-set'), /may not fit in the KV cache/);
});

// A cache's use at a moment crosses 95 % and back every few seconds: once red, the card stays red
// for some refreshes while the count still says over, rather than flip red and amber each time.
test('a working set shown evicting stays red for some refreshes while the count still says over', async () => {
  const page = await browser.newPage();
  let answers = 0;
  await withModel(page, (model) => {
    ++answers;
    // Which answer is shown, in the card's text.
    model.working_set = { ...model.working_set, fits: false, replicas_over: 1, ratio: 2.01,
                          recent_conversations: 100 + answers };
    // The first answer shows the turns evicting each other; the ones after, the count alone.
    model.history_read_from_cache = answers === 1 ? 0.3 : 0.96;
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  const shown = (n) => page.waitForFunction((text) => document.querySelector('#working-set').textContent.includes(text),
    `${100 + n} conversations going on`, { timeout: 30000 });
  const red = () => page.evaluate(() => document.querySelector('#working-set').classList.contains('warning'));
  await shown(1);
  assert.equal(await red(), true);
  await shown(3);
  assert.equal(await red(), true);
  await shown(7);
  assert.equal(await red(), false);
  assert.match(await page.textContent('#working-set'), /may not fit in the KV cache/);
});

test('a gateway that stops answering leaves the page greyed out, saying since when', async () => {
  const page = await browser.newPage();
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  assert.equal(await page.evaluate(() => document.body.classList.contains('stale')), false);
  await page.route(/\/warden\/v1\//, (route) => route.abort('connectionrefused'));
  await page.waitForFunction(() => document.body.classList.contains('stale'));
  assert.match(await page.textContent('#status'), /cannot reach the admin API since .*the figures shown are from/);
  await page.unroute(/\/warden\/v1\//);
  await page.waitForFunction(() => !document.body.classList.contains('stale'));
});

// The model's JSON as the gateway gives it, changed by `edit` for every GET the page sends.
async function withModel(page, edit) {
  await page.route(new RegExp(`/warden/v1/models/${MODEL}$`), async (route) => {
    if (route.request().method() !== 'GET') return route.continue();
    const response = await route.fetch();
    const model = await response.json();
    edit(model);
    await route.fulfill({ response, json: model });
  });
}

test('a replica that does not answer shows no engine figures, and draining the last one in service asks first', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await withModel(page, (m) => {
    m.layout = 'replicas';
    for (const r of m.replicas.slice(0, 3)) r.draining = true;
    Object.assign(m.replicas[1], { healthy: false, running: null, waiting: null, kv_cache_usage: null, held: 0,
                                   unhealthy_since_unix: Date.now() / 1000 - 60,
                                   health_problem: 'no answer on /health (Connection refused)' });
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  const dead = await page.$$eval('tr.replica[data-index="1"] td', (tds) => tds.map((td) => td.textContent));
  assert.match(dead[2], /^✗ down since \d\d:\d\d:\d\d( [AP]M)? · draining · not answering$/);
  assert.equal(await page.getAttribute('tr.replica[data-index="1"] td:nth-child(3)', 'title'),
               'no answer on /health (Connection refused)');
  // Running, waiting, KV cache and its last hit rate: none is a current figure.
  assert.deepEqual([dead[9], dead[10], dead[11], dead[12]], ['–', '–', '–', '–']);
  assert.equal(await page.evaluate(() => document.querySelector('tr.replica[data-index="1"]').classList.contains('unhealthy')), true);
  assert.match(await page.textContent('.badges'), /4 replicas · a server each/);
  assert.equal(await page.locator('.badge.off', { hasText: '1 of 4 replicas in service (1 down, 2 draining)' }).count(), 1);
  // Replica 3 is the last in service: draining it would refuse every request, so the page asks.
  let asked = '';
  page.once('dialog', async (d) => { asked = d.message(); await d.dismiss(); });
  await page.click('tr.replica[data-index="3"] button.drain');
  assert.match(asked, /No other replica of qwen3-4b-dp4 is in service/);
  assert.equal((await (await fetch(`${base}/warden/v1/models/${MODEL}`)).json()).replicas[3].draining, false);
  assert.equal(await page.getAttribute('tr.replica[data-index="3"] button.drain', 'aria-label'), 'Drain replica 3');
});

test('a replica whose engines sleep says so', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await withModel(page, (m) => {
    Object.assign(m.replicas[2], { healthy: false, unhealthy_since_unix: Date.now() / 1000 - 60,
                                   health_problem: 'asleep (vllm:engine_sleep_state: POST /wake_up wakes it)' });
    // With idle_sleep: in service asleep, then waking once a request went there.
    Object.assign(m.replicas[0], { asleep: true, waking: false });
    Object.assign(m.replicas[1], { asleep: true, waking: true });
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  assert.match(await page.textContent('tr.replica[data-index="2"] td:nth-child(3)'), /^✗ asleep since /);
  assert.match(await page.getAttribute('tr.replica[data-index="2"] td:nth-child(3)', 'title'), /POST \/wake_up/);
  assert.match(await page.textContent('tr.replica[data-index="0"] td:nth-child(3)'), /^✓ asleep, wakes on request/);
  assert.match(await page.textContent('tr.replica[data-index="1"] td:nth-child(3)'), /^✓ waking/);
});

test('a replica without a prefix cache is flagged, and the names the replicas also serve are shown', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await withModel(page, (m) => {
    // The demo's replicas all cache: as the gateway shows one started --no-enable-prefix-caching.
    m.replicas[2].prefix_caching = false;
    m.replicas[3].prefix_caching = null;  // a vLLM that does not say: nothing to flag
    m.served_names = ['sql', 'chat'];  // LoRA adapters the replicas list
    // First turns and requests placed by load have no home: the admin API's sticky share leaves
    // them out, and the panel shows it as it is.
    for (const r of m.replicas) Object.assign(r, { new: 50, balanced: 40, sticky: 9, overflow: 1, rehomed: 0 });
    Object.assign(m.totals, { sticky: 36, sticky_share: 0.9 });
  });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  assert.match(await page.textContent('.badges'), /prefix caching off on 1 replica: every turn there is computed whole/);
  assert.match(await page.textContent('.badges'), /also serves sql, chat/);
  assert.equal(await page.textContent('#total-sticky'), '36 · 90.0 %');
  const hits = (i) => page.$$eval(`tr.replica[data-index="${i}"] td`, (tds) => tds[12].textContent);
  assert.equal(await hits(2), 'caching off');
  assert.match(await hits(3), /%|–/);
  assert.match(await hits(0), /%|–/);
});

test('a value typed in the overflow limit is not written over by the refreshes', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  await page.fill('#overflow-input', '5');
  await page.focus('#overflow-set');  // on the way to the button, by keyboard
  const before = await page.textContent('#status');
  await page.waitForFunction((s) => document.querySelector('#status').textContent !== s, before, { timeout: 10000 });
  assert.equal(await page.inputValue('#overflow-input'), '5');
  assert.equal(await page.textContent('label[for="overflow-input"]'), 'Overflow limit');
  await page.press('#overflow-input', 'Escape');
  assert.equal(await page.inputValue('#overflow-input'), '8');
});

test('a drain button keeps the keyboard focus across refreshes, and a table wider than its card says so', async () => {
  const page = await browser.newPage({ viewport: { width: 760, height: 900 } });
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  await page.focus('tr.replica[data-index="1"] button.drain');
  const before = await page.textContent('#status');
  await page.waitForFunction((s) => document.querySelector('#status').textContent !== s, before, { timeout: 10000 });
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute('aria-label')), 'Drain replica 1');
  assert.equal(await page.evaluate(() => {
    const wrap = document.querySelector('.table-wrap');
    return wrap.scrollWidth > wrap.clientWidth;
  }), true);
  assert.equal(await page.isVisible('.scroll-hint'), true);
});

test('a gateway that answers nothing greys the page out instead of leaving old figures', async () => {
  const page = await browser.newPage();
  await page.goto(`${base}/panel/models/${MODEL}`);
  await page.waitForSelector('tr.replica');
  await page.route(/\/warden\/v1\//, () => {});  // held: no answer, no error
  await page.waitForFunction(() => document.body.classList.contains('stale'), null, { timeout: 15000 });
  assert.match(await page.textContent('#status'), /cannot reach the admin API since .*no answer in 6 s/);
  await page.unroute(/\/warden\/v1\//);
  await page.waitForFunction(() => !document.body.classList.contains('stale'), null, { timeout: 15000 });
});

test('the page of a model the gateway does not serve says so', async () => {
  const page = await browser.newPage();
  await page.goto(`${base}/panel/models/nope`);
  await page.waitForSelector('h1');
  await page.waitForFunction(() => document.querySelector('h1').textContent === 'No such model');
  assert.equal(await page.textContent('#status'), 'no such model');
  assert.doesNotMatch(await page.textContent('#app'), /nope/);  // the address is not echoed
  assert.equal(await page.evaluate(() => document.body.classList.contains('stale')), false);
});

test('the chart keeps the hour before a restart, and says since when it counts', async () => {
  // Replicas of their own, the same across the restart (the demo's start on new ports each time,
  // and a state file's replicas are known by their URLs).
  const dir = mkdtempSync(join(tmpdir(), 'warden-panel-state-'));
  const sim = await startWarden(['sim', '--port', '0', '--dp', '2', '--time-scale', '50', '--model', MODEL]);
  const args = ['serve', '--listen', '127.0.0.1:0', '--model', MODEL, '--url', `http://127.0.0.1:${sim.ports[0]}`,
                '--dp', '2', '--alias', 'claude-*', '--state-file', join(dir, 'state.json')];
  let own = await startWarden(args);
  try {
    let url = `http://127.0.0.1:${own.ports[0]}`;
    for (let i = 0; i < 3; ++i) {
      const res = await fetch(`${url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-claude-code-session-id': `kept${i}` },
        body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: words('k', 200) }] }),
      });
      assert.equal(res.status, 200);
    }
    const before = await (await fetch(`${url}/warden/v1/models/${MODEL}`)).json();
    assert.ok(before.history.computed_tokens > 0);
    await stopWarden(own.child);  // SIGTERM: the state file is written as it stops
    own = await startWarden(args);
    url = `http://127.0.0.1:${own.ports[0]}`;
    const after = await (await fetch(`${url}/warden/v1/models/${MODEL}`)).json();
    assert.equal(after.history.computed_tokens, before.history.computed_tokens);
    // The time it was down is a gap, not zero traffic: from the stop's save to the restart.
    assert.equal(after.history.gaps.length, 1);
    assert.ok(Math.abs(after.history.gaps[0][1] - after.started_unix) < 1, JSON.stringify(after.history.gaps));
    const page = await browser.newPage();
    await page.goto(`${url}/panel/models/${MODEL}`);
    await page.waitForFunction(() => document.querySelector('#cached-share').textContent.includes('%'), null, { timeout: 20000 });
    assert.match(await page.textContent('#cached-share-of'), /since [^(]+ \(kept across the gateway's restart at [^)]+\) were read from cache/);
  } finally {
    await stopWarden(own.child);
    await stopWarden(sim.child);
    rmSync(dir, { recursive: true, force: true });
  }
});
