// Agents built on the official OpenAI and Anthropic client libraries, sending no session id,
// through the gateway: their conversations are keyed by their opening and stay on one replica.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startWarden, stopWarden } from './support.mjs';

const MODEL = 'qwen3-4b-dp4';
let gateway, base;

before(async () => {
  gateway = await startWarden(['serve', '--demo', '--time-scale', '100', '--listen', '127.0.0.1:0']);
  base = `http://127.0.0.1:${gateway.ports[0]}`;
});
after(() => stopWarden(gateway.child));

const words = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix}${i}`).join(' ');

test('an OpenAI-client conversation without a session id stays on one replica', async () => {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused' });
  const messages = [{ role: 'system', content: words('sys', 300) }, { role: 'user', content: words('oa', 400) }];
  const turns = [];
  for (let turn = 0; turn < 4; ++turn) {
    const { data, response } = await client.chat.completions
      .create({ model: MODEL, messages, max_tokens: 16 })
      .withResponse();
    turns.push({ replica: response.headers.get('x-warden-replica'), route: response.headers.get('x-warden-route'),
                 cached: data.usage.prompt_tokens_details?.cached_tokens ?? 0 });
    messages.push({ role: 'assistant', content: data.choices[0].message.content });
    messages.push({ role: 'user', content: words(`oa${turn}t`, 40) });
  }
  assert.deepEqual(turns.map((t) => t.route), ['new', 'sticky', 'sticky', 'sticky']);
  assert.equal(new Set(turns.map((t) => t.replica)).size, 1);
  for (const t of turns.slice(1)) assert.ok(t.cached > 700, `later turns read their history from cache: ${t.cached}`);
});

test('an Anthropic-client conversation without a session id stays on one replica', async () => {
  const client = new Anthropic({ baseURL: base, apiKey: 'unused' });
  const messages = [{ role: 'user', content: [{ type: 'text', text: words('an', 400), cache_control: { type: 'ephemeral' } }] }];
  const turns = [];
  for (let turn = 0; turn < 4; ++turn) {
    const { data, response } = await client.messages
      .create({ model: 'claude-sonnet-4-5', system: words('sys', 300), messages, max_tokens: 16 })
      .withResponse();
    turns.push({ replica: response.headers.get('x-warden-replica'), route: response.headers.get('x-warden-route'),
                 cached: data.usage.cache_read_input_tokens ?? 0 });
    // As Claude Code does: the cache mark moves to the newest message.
    for (const m of messages) if (Array.isArray(m.content)) for (const b of m.content) delete b.cache_control;
    messages.push({ role: 'assistant', content: data.content[0].text });
    messages.push({ role: 'user', content: [{ type: 'text', text: words(`an${turn}t`, 40), cache_control: { type: 'ephemeral' } }] });
  }
  assert.deepEqual(turns.map((t) => t.route), ['new', 'sticky', 'sticky', 'sticky']);
  assert.equal(new Set(turns.map((t) => t.replica)).size, 1);
  for (const t of turns.slice(1)) assert.ok(t.cached > 700, `later turns read their history from cache: ${t.cached}`);
});
