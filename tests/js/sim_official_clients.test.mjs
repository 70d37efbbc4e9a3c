// The simulator's streams, read by the official OpenAI and Anthropic client libraries: if their
// parsers accept our wire format and see the usage we report, so will real clients.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startWarden, stopWarden } from './support.mjs';

let sim;
let base;

before(async () => {
  sim = await startWarden(['sim', '--port', '0', '--dp', '2', '--time-scale', '100', '--api-latency', '0',
                           '--model', 'qwen3-4b']);
  base = `http://127.0.0.1:${sim.ports[0]}`;
});
after(() => stopWarden(sim.child));

const words = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix}${i}`).join(' ');

test('openai client streams a chat completion with usage and cached tokens', async () => {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused' });
  const messages = [{ role: 'system', content: words('sys', 60) }, { role: 'user', content: words('q', 40) }];
  const run = async () => {
    const stream = await client.chat.completions.create({
      model: 'qwen3-4b', messages, max_tokens: 12, stream: true,
      stream_options: { include_usage: true },
    }, { headers: { 'X-data-parallel-rank': '1' } });
    let text = '';
    let usage = null;
    let finish = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices[0];
      if (choice?.delta?.content) text += choice.delta.content;
      if (choice?.finish_reason) finish = choice.finish_reason;
    }
    return { text, usage, finish };
  };
  const first = await run();
  assert.equal(first.text.split(' ').length, 12);
  assert.equal(first.finish, 'length');
  assert.equal(first.usage.prompt_tokens, 65 + 45 + 3);
  assert.equal(first.usage.completion_tokens, 12);
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
  const second = await run();  // same prompt, same rank: every full block but the last token's
  assert.equal(second.usage.prompt_tokens_details.cached_tokens, 112);
  assert.equal(second.text, first.text);  // deterministic filler
});

test('anthropic client streams a message with cache reads in its usage', async () => {
  const client = new Anthropic({ baseURL: base, apiKey: 'unused' });
  const params = {
    model: 'qwen3-4b', max_tokens: 9,
    system: [{ type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.328; cc_entrypoint=cli;' },
             { type: 'text', text: words('sys', 60) }],
    messages: [{ role: 'user', content: words('q', 40) }],
  };
  const opts = { headers: { 'X-data-parallel-rank': '0' } };
  const seen = [];
  const stream = client.messages.stream(params, opts);
  stream.on('streamEvent', (e) => seen.push(e.type));
  const first = await stream.finalMessage();
  assert.deepEqual(seen.slice(0, 2), ['message_start', 'content_block_start']);
  assert.deepEqual(seen.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  assert.equal(first.content[0].type, 'text');
  assert.equal(first.content[0].text.split(' ').length, 9);
  assert.equal(first.stop_reason, 'max_tokens');
  assert.equal(first.usage.output_tokens, 9);

  const second = await client.messages.stream(params, opts).finalMessage();
  // The attribution block is stripped: 65 + 45 + 3 = 113 prompt tokens, 112 of them cached.
  assert.equal(second.usage.cache_read_input_tokens, 112);
  assert.equal(second.usage.input_tokens, 1);
});

test('anthropic count_tokens matches the prompt the engine sees', async () => {
  const client = new Anthropic({ baseURL: base, apiKey: 'unused' });
  const count = await client.messages.countTokens({
    model: 'qwen3-4b', messages: [{ role: 'user', content: words('q', 40) }],
  });
  assert.equal(count.input_tokens, 45 + 3);
});
