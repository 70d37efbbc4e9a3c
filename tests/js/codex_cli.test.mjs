// The real Codex CLI (npm @openai/codex) against the gateway as the README's quick start sets it up:
// OpenAI's Responses API (/v1/responses), keyed by the session id Codex sends, in front of two
// `warden sim` servers (one per GPU: vLLM reads no rank header on /v1/responses, so the
// data-parallel layout would leave Codex's requests to vLLM's own balancer). A session and its
// resumed turns stay on one replica, which reads their history from its prefix cache.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import http from 'node:http';
import { startWarden, stopWarden, runCommand, accessLogOf } from './support.mjs';

const MODEL = 'qwen3-4b-dp4';
let sims = [];
let gateway, base, home, codexHome, project;

function codexScript() {
  return createRequire(import.meta.url).resolve('@openai/codex/bin/codex.js');
}

// Runs `codex` with `args` in the test's project folder; resolves to { code, stdout, stderr }.
function codex(args) {
  const env = { PATH: process.env.PATH, HOME: home, CODEX_HOME: codexHome };
  return runCommand(process.execPath, [codexScript(), ...args], { cwd: project, env });
}

before(async () => {
  for (let i = 0; i < 2; ++i)
    sims.push(await startWarden(['sim', '--port', '0', '--model', MODEL, '--time-scale', '50']));
  const urls = sims.flatMap((s) => ['--url', `http://127.0.0.1:${s.ports[0]}`]);
  gateway = await startWarden(['serve', '--listen', '127.0.0.1:0', '--model', MODEL, ...urls, '--access-log']);
  base = `http://127.0.0.1:${gateway.ports[0]}`;
  home = mkdtempSync(join(tmpdir(), 'warden-codex-home-'));
  codexHome = mkdtempSync(join(tmpdir(), 'warden-codex-config-'));
  project = mkdtempSync(join(tmpdir(), 'warden-codex-project-'));
  writeConfig(base);
});

// Codex's config: the gateway at `url` as its model provider, over the Responses API.
function writeConfig(url) {
  writeFileSync(join(codexHome, 'config.toml'), [
    `model = "${MODEL}"`,
    'model_provider = "warden"',
    'model_context_window = 32768',
    'model_auto_compact_token_limit = 24000',
    '',
    '[model_providers.warden]',
    'name = "LM Warden"',
    `base_url = "${url}/v1"`,
    'wire_api = "responses"',
    '',
  ].join('\n'));
}
after(async () => {
  await stopWarden(gateway.child);
  for (const s of sims) await stopWarden(s.child);
  for (const dir of [home, codexHome, project]) rmSync(dir, { recursive: true, force: true });
});

test('a Codex session and its resumed turns stay on one replica and read their history from cache', async () => {
  const first = await codex(['exec', '--skip-git-repo-check', 'Say hello in one line.']);
  assert.equal(first.code, 0, `codex exec failed: ${first.stderr}`);
  assert.ok(first.stdout.trim().length > 0, 'the simulated reply reaches the terminal');
  for (const prompt of ['And once more.', 'And a third time.']) {
    const next = await codex(['exec', '--skip-git-repo-check', 'resume', '--last', prompt]);
    assert.equal(next.code, 0, `codex exec resume failed: ${next.stderr}`);
  }

  const log = await accessLogOf(gateway.lines, '/v1/responses', 3);
  assert.equal(log.length, 3, 'one request a turn');
  assert.deepEqual(log.map((e) => e.status), [200, 200, 200]);
  assert.equal(log[0].key, 'header', "keyed by Codex's session-id header");
  assert.deepEqual(log.map((e) => e.route), ['new', 'sticky', 'sticky']);
  assert.equal(new Set(log.map((e) => e.replica)).size, 1, 'every turn on one replica');
  for (const e of log.slice(1))
    assert.ok(e.cached >= e.prompt - 64, `a resumed turn reads its history from cache: ${e.cached} of ${e.prompt}`);
});

// A replica that dies in the middle of a streamed turn (a fake one that cuts its first stream):
// the gateway ends the stream with an error event and response.failed, saying what happened;
// Codex sends the turn again, and if it keeps failing it gives up saying why (on a plain cut it
// said "error decoding response body").
test('a stream the replica breaks off is sent again by Codex, which says why', async () => {
  const requests = [];
  const fake = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const path = req.url.split('?')[0];
      if (path === '/health') return res.end();
      if (path === '/metrics') return res.end('');
      if (path === '/v1/models') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', max_model_len: 32768 }] }));
      }
      if (path !== '/v1/responses') { res.writeHead(404); return res.end(); }
      requests.push(JSON.parse(body).stream);
      const breaks = requests.length === 1 || body.includes('zqx-break-every-stream');
      const id = `resp_${requests.length}`;
      const response = (status, output = []) => ({ id, object: 'response', created_at: 1, status, model: MODEL, output,
                                                   error: null, incomplete_details: null, usage: null });
      let sequence = 0;
      const event = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      event('response.created', { response: response('in_progress') });
      event('response.output_item.added', { output_index: 0, item: { id: 'msg_1', type: 'message', status: 'in_progress', role: 'assistant', content: [] } });
      event('response.content_part.added', { item_id: 'msg_1', output_index: 0, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
      event('response.output_text.delta', { item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Hello ' });
      if (breaks) return setTimeout(() => res.socket.destroy(), 50);  // the replica dies
      event('response.output_text.delta', { item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'again.' });
      const item = { id: 'msg_1', type: 'message', status: 'completed', role: 'assistant',
                     content: [{ type: 'output_text', text: 'Hello again.', annotations: [] }] };
      event('response.output_item.done', { output_index: 0, item });
      event('response.completed', { response: { ...response('completed', [item]),
                                                usage: { input_tokens: 10, output_tokens: 2, total_tokens: 12 } } });
      res.end();
    });
  });
  await new Promise((resolve) => fake.listen(0, '127.0.0.1', resolve));
  const own = await startWarden(['serve', '--listen', '127.0.0.1:0', '--model', MODEL,
                                 '--url', `http://127.0.0.1:${fake.address().port}`]);
  try {
    writeConfig(`http://127.0.0.1:${own.ports[0]}`);
    const run = await codex(['exec', '--skip-git-repo-check', 'Say hello in one line.']);
    assert.equal(run.code, 0, `codex exec failed: ${run.stdout} ${run.stderr}`);
    assert.match(run.stdout, /Hello again\./);
    assert.deepEqual(requests, [true, true], 'the broken stream, then the same turn again');
    // A replica that breaks every stream: Codex gives up after its retries, saying why.
    requests.length = 0;
    const failed = await codex(['exec', '--skip-git-repo-check', 'zqx-break-every-stream']);
    assert.notEqual(failed.code, 0);
    assert.ok(requests.length > 1, `sent again: ${requests.length}`);
    assert.match(failed.stderr, /replica 0 closed its connection in the middle of this response/);
  } finally {
    writeConfig(base);
    await stopWarden(own.child);
    fake.close();
    fake.closeAllConnections();
  }
});
