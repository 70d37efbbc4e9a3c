// The real Claude Code CLI (npm @anthropic-ai/claude-code, its native binary) pointed at the demo
// gateway as the README's quick start says: a session and its continuations (`claude -c`) are
// keyed by Claude Code's own session header and stay on one replica, which reads the history from
// its prefix cache; a session that outgrows the model's context is told so in the words Claude Code
// acts on, and it compacts its conversation and goes on.
import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import http from 'node:http';
import { startWarden, stopWarden, runCommand, accessLogOf } from './support.mjs';

const MODEL = 'qwen3-4b-dp4';
let gateway, base, home, project;
let extraEnv = {};  // more of Claude Code's environment, for one test

// The platform package's binary: the wrapper package's own `claude` is put in place by an install
// script, which npm does not run unless told to.
function claudeBinary() {
  const require = createRequire(import.meta.url);
  const manifest = require.resolve(`@anthropic-ai/claude-code-linux-${process.arch}/package.json`);
  const binary = join(manifest, '..', 'claude');
  assert.ok(existsSync(binary), `no Claude Code binary at ${binary}: run scripts/install-test-tools.sh`);
  return binary;
}

// A replica of model `m` for Claude Code's requests: what vLLM answers besides /v1/messages, which
// `messages` answers, given the request's JSON, the response, helpers to write a JSON answer or an
// event, and the start of a message to fill.
function fakeReplica(messages) {
  return http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const path = req.url.split('?')[0];
      const json = (status, value) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      if (path === '/health') return res.end();
      if (path === '/metrics') return res.end('');
      if (path === '/v1/models') return json(200, { object: 'list', data: [{ id: 'm', object: 'model', max_model_len: 200000 }] });
      if (path === '/v1/messages/count_tokens') return json(200, { input_tokens: 10 });
      if (path !== '/v1/messages') return json(404, { type: 'error', error: { type: 'not_found_error', message: 'no' } });
      const message = { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [],
                        stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } };
      const event = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
      messages({ request: JSON.parse(body), res, json, event, message });
    });
  });
}

// Runs `claude` with `args` in the test's project folder; resolves to { code, stdout, stderr }.
function claude(args) {
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    ANTHROPIC_BASE_URL: base,
    ANTHROPIC_API_KEY: 'sk-test-unused',
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    ...extraEnv,
  };
  return runCommand(claudeBinary(), args, { cwd: project, env });
}

async function model() {
  const r = await fetch(`${base}/warden/v1/models/${MODEL}`);
  assert.equal(r.status, 200);
  return r.json();
}

const sum = (m, field) => m.replicas.reduce((total, r) => total + r[field], 0);

beforeEach(async () => {
  home = mkdtempSync(join(tmpdir(), 'warden-claude-home-'));
  project = mkdtempSync(join(tmpdir(), 'warden-claude-project-'));
  gateway = await startWarden(['serve', '--demo', '--time-scale', '50', '--access-log', '--listen', '127.0.0.1:0']);
  base = `http://127.0.0.1:${gateway.ports[0]}`;
});
afterEach(async () => {
  extraEnv = {};
  await stopWarden(gateway.child);
  rmSync(home, { recursive: true, force: true });
  rmSync(project, { recursive: true, force: true });
});

test('a Claude Code session and its continuation stay on one replica and read their history from cache', async () => {
  const first = await claude(['-p', 'Say hello in one line.']);
  assert.equal(first.code, 0, `claude -p failed: ${first.stderr}`);
  assert.ok(first.stdout.trim().length > 0, 'the simulated reply reaches the terminal');

  const second = await claude(['-c', '-p', 'And once more.']);
  assert.equal(second.code, 0, `claude -c -p failed: ${second.stderr}`);
  assert.ok(second.stdout.trim().length > 0);

  const m = await model();
  assert.equal(m.key_sources['claude-code-header'], 2, 'both turns keyed by X-Claude-Code-Session-Id');
  assert.equal(m.key_sources.none, 0);
  assert.equal(m.sessions.known, 1, 'one conversation');
  assert.equal(m.follow_up_turns, 1);
  assert.equal(m.stayed_on_replica, 1);
  assert.equal(m.history_read_from_cache, 1, 'the second turn read its whole history from the cache');
  const served = m.replicas.filter((r) => r.requests > 0);
  assert.equal(served.length, 1, 'both turns on one replica');
  assert.deepEqual([served[0].new, served[0].sticky], [1, 1]);
  assert.ok(served[0].cached_prompt_tokens > 10000, `history from cache: ${served[0].cached_prompt_tokens} tokens`);
});

test('a Claude Code session past the context compacts its conversation and stays on its replica', async () => {
  // Claude Code's own prompt is about 12 K tokens; 3,000 more a turn outgrow the demo model's
  // 32,768 within a few turns.
  const words = Array.from({ length: 3000 }, (_, i) => `word${i}`).join(' ');
  let requests = 0;
  let context = 0;
  let compactedAt = -1;
  for (let turn = 0; turn < 10 && compactedAt < 0; ++turn) {
    const run = await claude([...(turn > 0 ? ['-c'] : []), '-p', `Turn ${turn}: ${words}`]);
    assert.equal(run.code, 0, `turn ${turn} failed: ${run.stdout} ${run.stderr}`);
    const m = await model();
    const sent = sum(m, 'requests') - requests;
    const now = sum(m, 'active_context_tokens');
    if (sent > 1 && now < context) compactedAt = turn;  // refused, then compacted and answered
    else assert.equal(sent, 1, `turn ${turn}: one request`);
    requests += sent;
    context = now;
  }
  assert.ok(compactedAt >= 3, `the conversation outgrew the context and was compacted (turn ${compactedAt})`);

  const after = await claude(['-c', '-p', 'After the compaction.']);
  assert.equal(after.code, 0, after.stderr);
  const m = await model();
  assert.equal(m.sessions.known, 1, 'one conversation throughout');
  assert.equal(m.key_sources['claude-code-header'], requests + 1);

  const log = await accessLogOf(gateway.lines, '/v1/messages', requests + 1);
  assert.equal(log.length, requests + 1);
  const refused = log.filter((e) => e.status === 400);
  assert.ok(refused.length >= 1, 'the replica refused the prompt that outgrew its context');
  assert.equal(log.filter((e) => e.status !== 400 && e.status !== 200).length, 0);
  assert.equal(new Set(log.map((e) => e.replica)).size, 1, 'every request on one replica');
  assert.deepEqual([...new Set(log.map((e) => e.route))], ['new', 'sticky']);
  const answered = log.filter((e) => e.status === 200).map((e) => e.prompt);
  assert.ok(answered.at(-1) < Math.max(...answered) - 5000,
            `the compacted conversation is shorter: ${answered.join(', ')}`);
});

test("a Claude Code subagent is a conversation of its own, placed apart from its parent's", async () => {
  // The simulator's test hook: the reply to this prompt calls Claude Code's Agent tool.
  const call = { name: 'Agent', input: { description: 'Say hi', prompt: 'Say hi.', subagent_type: 'general-purpose' } };
  const run = await claude(['-p', `warden-sim-tool-use: ${JSON.stringify(call)}`]);
  assert.equal(run.code, 0, `claude -p failed: ${run.stderr}`);

  const m = await model();
  const requests = sum(m, 'requests');
  assert.equal(m.key_sources['claude-code-header'], requests);
  assert.equal(m.sessions.known, 2, 'the session, and its subagent (session:agent)');
  const log = await accessLogOf(gateway.lines, '/v1/messages', requests);
  assert.ok(log.every((e) => e.status === 200));
  // The log is in the order requests ended: the parent's first turn ends before its reply starts
  // the subagent.
  const parent = log[0];
  assert.equal(parent.route, 'new');
  const placed = log.filter((e) => e.route === 'new');
  assert.equal(placed.length, 2, 'two conversations placed');
  assert.notEqual(placed[1].replica, parent.replica, 'the subagent goes where no conversation is homed');
  assert.ok(placed[1].prompt < parent.prompt, "the subagent's own, shorter prompt");
  const parentTurns = log.filter((e) => e.route === 'sticky' && e.replica === parent.replica);
  assert.ok(parentTurns.length >= 1, "the parent's later turns (the agent's result) went home");
  assert.ok(log.every((e) => e.replica === parent.replica || e.replica === placed[1].replica));
});

test("Claude Code reaches the gateway's own TLS listener and its session stays on its replica", async () => {
  await stopWarden(gateway.child);
  const tls = new URL('../fixtures/tls/', import.meta.url).pathname;
  gateway = await startWarden(['serve', '--demo', '--time-scale', '50', '--access-log',
                               '--listen', '127.0.0.1:0', '--tls-cert-file', `${tls}localhost-cert.pem`,
                               '--tls-key-file', `${tls}localhost-key.pem`]);
  base = `https://localhost:${gateway.ports[0]}`;
  extraEnv = { NODE_EXTRA_CA_CERTS: `${tls}localhost-cert.pem` };  // the self-signed certificate
  const first = await claude(['-p', 'Say hello in one line.']);
  assert.equal(first.code, 0, `claude -p over https failed: ${first.stderr}`);
  const second = await claude(['-c', '-p', 'And once more.']);
  assert.equal(second.code, 0, `claude -c -p over https failed: ${second.stderr}`);

  const log = await accessLogOf(gateway.lines, '/v1/messages', 2);
  assert.equal(log.length, 2);
  assert.ok(log.every((e) => e.status === 200 && e.key === 'claude-code-header'));
  assert.deepEqual(log.map((e) => e.route), ['new', 'sticky']);
  assert.equal(log[1].replica, log[0].replica);
  assert.ok(log[1].cached > 10000, `the second turn's history from cache: ${log[1].cached} tokens`);
  assert.ok(gateway.lines.some((l) => l.includes(`listening ${base.replace('localhost', '127.0.0.1')}`)));
});

// A replica that dies in the middle of a streamed turn (here a fake one that cuts its first stream
// after a few events): the gateway ends the stream with an error event, on which Claude Code sends
// the turn again at once, without streaming, and finishes. (On a plain cut it retried the stream,
// with pauses growing to tens of seconds.)
test('a stream the replica breaks off is sent again by Claude Code at once', async () => {
  await stopWarden(gateway.child);
  const seen = [];  // the fake's /v1/messages requests: whether each asked for a stream
  let broken = false;
  const fake = fakeReplica(({ request, res, json, event, message }) => {
    seen.push(Boolean(request.stream));
    if (!request.stream) {
      return json(200, { ...message, content: [{ type: 'text', text: 'WHOLE ANSWER' }], stop_reason: 'end_turn' });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    event('message_start', { message });
    event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
    event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'PART ' } });
    if (!broken) {
      broken = true;
      return setTimeout(() => res.socket.destroy(), 50);  // the replica dies
    }
    event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'STREAMED' } });
    event('content_block_stop', { index: 0 });
    event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } });
    event('message_stop', {});
    res.end();
  });
  await new Promise((resolve) => fake.listen(0, '127.0.0.1', resolve));
  try {
    gateway = await startWarden(['serve', '--listen', '127.0.0.1:0', '--model', 'm', '--alias', 'claude-*',
                                 '--url', `http://127.0.0.1:${fake.address().port}`]);
    base = `http://127.0.0.1:${gateway.ports[0]}`;
    const run = await claude(['-p', 'Say hello in one line.']);
    assert.equal(run.code, 0, `claude -p failed: ${run.stdout} ${run.stderr}`);
    assert.match(run.stdout, /WHOLE ANSWER/);
    assert.deepEqual(seen, [true, false], 'the broken stream, then the same turn without streaming');
  } finally {
    fake.close();
    fake.closeAllConnections();
  }
});

// A replica that queues the turn (its head at once, its first event late): past
// stream_keepalive_s the gateway sends the head with ping events before message_start, and Claude
// Code takes them as Anthropic's own pings and waits for the answer.
test('Claude Code waits through the pings sent while its turn is queued', async () => {
  await stopWarden(gateway.child);
  const fake = fakeReplica(({ request, res, json, event, message }) => {
    if (!request.stream) {
      return json(200, { ...message, content: [{ type: 'text', text: 'NOT STREAMED' }], stop_reason: 'end_turn' });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();  // as vLLM does when it queues the request
    setTimeout(() => {
      event('message_start', { message });
      event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
      event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'QUEUED ANSWER' } });
      event('content_block_stop', { index: 0 });
      event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } });
      event('message_stop', {});
      res.end();
    }, 1500);
  });
  await new Promise((resolve) => fake.listen(0, '127.0.0.1', resolve));
  try {
    gateway = await startWarden(['serve', '--listen', '127.0.0.1:0', '--model', 'm', '--alias', 'claude-*',
                                 '--url', `http://127.0.0.1:${fake.address().port}`, '--stream-keepalive', '0.2']);
    base = `http://127.0.0.1:${gateway.ports[0]}`;
    const run = await claude(['-p', 'Say hello in one line.']);
    assert.equal(run.code, 0, `claude -p failed: ${run.stdout} ${run.stderr}`);
    assert.match(run.stdout, /QUEUED ANSWER/);
    const metrics = await (await fetch(`${base}/metrics`)).text();
    const kept = Number(metrics.match(/^warden_streams_kept_alive_total (\d+)$/m)?.[1]);
    assert.ok(kept >= 1, `streams kept alive: ${kept}`);
  } finally {
    fake.close();
    fake.closeAllConnections();
  }
});
