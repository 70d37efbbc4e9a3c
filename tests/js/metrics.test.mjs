// The gateway's /metrics, read by a Prometheus text-format parser from npm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { readFileSync } from 'node:fs';
import { startWarden, stopWarden } from './support.mjs';

let gateway, base;
before(async () => {
  gateway = await startWarden(['serve', '--demo', '--time-scale', '100', '--listen', '127.0.0.1:0']);
  base = `http://127.0.0.1:${gateway.ports[0]}`;
});
after(() => stopWarden(gateway.child));

test('gateway metrics parse and count routed requests and prompt tokens', async () => {
  for (let i = 0; i < 3; ++i) {
    const res = await fetch(`${base}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-claude-code-session-id': 'metrics-session' },
      body: JSON.stringify({ model: 'qwen3-4b-dp4', max_tokens: 4, stream: true,
                             messages: [{ role: 'user', content: Array.from({ length: 100 }, (_, i) => `w${i}`).join(' ') }] }),
    });
    await res.text();
  }
  const text = await (await fetch(`${base}/metrics`)).text();
  const families = parsePrometheusTextFormat(text);
  const byName = Object.fromEntries(families.map((f) => [f.name, f]));
  for (const name of ['warden_requests_total', 'warden_requests_in_flight', 'warden_active_conversations',
                      'warden_prompt_tokens_total', 'warden_time_to_first_token_seconds', 'warden_scrape_errors_total',
                      'warden_replica_healthy', 'warden_requests_held']) {
    assert.ok(byName[name], `${name} is exported`);
  }
    assert.equal(byName.warden_time_to_first_token_seconds.type, 'HISTOGRAM');
  assert.equal(byName.warden_requests_held.metrics.reduce((a, m) => a + Number(m.value), 0), 0);  // admission off
  const sum = (family, pred) => family.metrics.filter((m) => pred(m.labels)).reduce((a, m) => a + Number(m.value), 0);
  assert.equal(sum(byName.warden_requests_total, () => true), 3);
  assert.equal(sum(byName.warden_requests_total, (l) => l.route === 'new'), 1);
  assert.equal(sum(byName.warden_requests_total, (l) => l.route === 'sticky'), 2);
  assert.ok(sum(byName.warden_prompt_tokens_total, (l) => l.kind === 'cached') > 0);
  // (This parser folds a histogram's label sets together: read the _count lines from the text.)
  const ttftCount = [...text.matchAll(/^warden_time_to_first_token_seconds_count\{[^}]*\} (\S+)$/gm)]
    .reduce((a, m) => a + Number(m[1]), 0);
  assert.equal(ttftCount, 3);
});

test('every metric the Grafana dashboard queries is one the gateway exports', async () => {
  const dashboard = JSON.parse(readFileSync(new URL('../../docs/grafana-dashboard.json', import.meta.url), 'utf8'));
  const exprs = dashboard.panels.flatMap((p) => (p.targets || []).map((t) => t.expr));
  const text = await (await fetch(`${base}/metrics`)).text();
  const exported = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
  const queried = new Set(exprs.flatMap((e) => [...e.matchAll(/\bwarden_[a-z_]+/g)].map((m) => m[0].replace(/_bucket$/, ''))));
  assert.ok(queried.size >= 10);
  for (const name of queried) assert.ok(exported.has(name), `${name} is exported`);
  // Every series is of the model and the gateways picked (with peers, one Prometheus target each).
  for (const expr of exprs) {
    for (const selector of expr.matchAll(/\bwarden_[a-z_]+\{([^}]*)\}/g)) {
      assert.match(selector[1], /^model="\$model",instance=~"\$instance"/, expr);
    }
  }
  const variables = dashboard.templating.list.map((v) => v.name);
  assert.deepEqual(variables, ['datasource', 'model', 'instance']);
});
