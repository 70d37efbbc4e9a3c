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
  writeFileSync(join(codexHome, 'config.toml'), [
    `model = "${MODEL}"`,
    'model_provider = "warden"',
    'model_context_window = 32768',
    'model_auto_compact_token_limit = 24000',
    '',
    '[model_providers.warden]',
    'name = "LM Warden"',
    `base_url = "${base}/v1"`,
    'wire_api = "responses"',
    '',
  ].join('\n'));
});
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
