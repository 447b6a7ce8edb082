// nanochat (issue 16) end to end: the real server on a checkpoint directory generated here by
// lmserve-mkmodel --shape nanochat-tiny (random BF16 weights, a random tokenizer.json with
// nanochat's nine specials) answers in all three dialects, created and streamed; renders with
// nanochat's rules (system merged, alternation enforced); stops on <|assistant_end|> and <|bos|>;
// has no tool convention (400 on the OpenAI dialects, dropped on /v1/messages) and no reasoning;
// and runs nanochat's calculator: a lark constraint makes the model emit
// <|python_start|>6*7<|python_end|> and then "x", so the "42" between them can only be the
// server's forced <|output_start|>42<|output_end|> (docs/nanochat.md "The calculator").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, BIN } from './harness.mjs';

const MKMODEL = path.join(path.dirname(BIN), 'lmserve-mkmodel');
let dir, srv, oai, ant, SP;
const G = { temperature: 0 };
const CALC = 'start: <|python_start|> "6*7" <|python_end|> "x"';
const CALC_TEXT = '<|python_start|>6*7<|python_end|><|output_start|>42<|output_end|>x';

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lms-nanochat-'));
  execFileSync(MKMODEL, ['--shape', 'nanochat-tiny', '--type', 'bf16', '--seed', '5', '-o', dir], { stdio: 'ignore' });
  SP = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')).special_tokens;
  srv = await startServer([], { model: dir });
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const r = await srv.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  assert.equal(r.code, 0, srv.log());
});

async function post(p, body) {
  const r = await fetch(`${srv.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

test('nanochat loads; chat completions, responses and messages answer (create and stream)', async () => {
  assert.match(srv.log(), /arch nanochat/, srv.log());
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me about the sea.' }];
  const c = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 12, ...G });
  assert.equal(c.usage.completion_tokens, c.choices[0].finish_reason === 'length' ? 12 : c.usage.completion_tokens);
  let text = '';
  for await (const ch of await oai.chat.completions.create({ model: 'm', messages, max_tokens: 12, stream: true, ...G }))
    for (const x of ch.choices) text += x.delta.content ?? '';
  assert.equal(text, c.choices[0].message.content);

  const r = await oai.responses.create({ model: 'm', instructions: 'Be brief.', input: 'Tell me about the sea.', max_output_tokens: 12, ...G });
  assert.equal(r.output_text, c.choices[0].message.content);
  assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
  let rt = '';
  for await (const ev of await oai.responses.create({ model: 'm', instructions: 'Be brief.', input: 'Tell me about the sea.', max_output_tokens: 12, stream: true, ...G }))
    if (ev.type === 'response.output_text.delta') rt += ev.delta;
  assert.equal(rt, r.output_text);

  const m = await ant.messages.create({ model: 'm', max_tokens: 12, system: 'Be brief.', messages: messages.slice(1), ...G });
  assert.equal(m.content[0].text, c.choices[0].message.content);
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, c.usage.prompt_tokens);
  const fin = await ant.messages.stream({ model: 'm', max_tokens: 12, system: 'Be brief.', messages: messages.slice(1), ...G }).finalMessage();
  assert.equal(fin.content[0].text, m.content[0].text);
});

test('prompt: <|bos|><|user_start|>system\\n\\nuser<|user_end|><|assistant_start|>, roles must alternate', async () => {
  // "a" and "b" are one byte token each here; \n\n two at most: count against the bare user turn
  const one = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'b' }], max_tokens: 1, ...G });
  assert.equal(one.usage.prompt_tokens, 5); // bos, user_start, "b", user_end, assistant_start
  const sys = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'system', content: 'a' }, { role: 'user', content: 'b' }], max_tokens: 1, ...G });
  assert.ok(sys.usage.prompt_tokens >= 7 && sys.usage.prompt_tokens <= 8, String(sys.usage.prompt_tokens));
  let e = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'a' }, { role: 'user', content: 'b' }], max_tokens: 4 });
  assert.equal(e.status, 400);
  assert.equal(e.body.error.param, 'messages[1].role');
  e = await post('/v1/chat/completions', { messages: [{ role: 'system', content: 'a' }], max_tokens: 4 });
  assert.equal(e.status, 400);
  e = await post('/v1/messages', { model: 'm', max_tokens: 4, messages: [{ role: 'assistant', content: 'a' }] });
  assert.equal(e.status, 400);
  assert.equal(e.body.type, 'error');
});

test('the reply ends on <|assistant_end|> and on <|bos|>', async () => {
  for (const t of ['<|assistant_end|>', '<|bos|>']) {
    const c = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8,
      logit_bias: { [SP[t]]: 100 }, ...G });
    assert.equal(c.choices[0].finish_reason, 'stop', t);
    assert.equal(c.choices[0].message.content, '', t);
    assert.equal(c.usage.completion_tokens, 0, t);
  }
});

test('no tool convention: 400 on chat completions and responses, dropped on messages; no reasoning', async () => {
  const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object' } } };
  let e = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, tools: [tool] });
  assert.equal(e.status, 400);
  assert.equal(e.body.error.param, 'tools');
  e = await post('/v1/responses', { input: 'hi', max_output_tokens: 4, tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }] });
  assert.equal(e.status, 400);
  const m = await ant.messages.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
    tools: [{ name: 'f', input_schema: { type: 'object' } }], ...G });
  assert.equal(m.type, 'message');
  e = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, reasoning_effort: 'high' });
  assert.equal(e.status, 400);
  assert.equal(e.body.error.param, 'reasoning_effort');
});

test('calculator: <|python_start|>6*7<|python_end|> gets <|output_start|>42<|output_end|> forced, all dialects, streamed and not', async () => {
  const messages = [{ role: 'user', content: 'What is 6*7?' }];
  const c = await post('/v1/chat/completions', { messages, max_tokens: 30, lark: CALC, ...G });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  assert.equal(c.body.choices[0].message.content, CALC_TEXT);
  assert.equal(c.body.choices[0].finish_reason, 'stop');
  // python_start, 6, *, 7, python_end, output_start, 42 (1 or 2 tokens), output_end, x
  assert.ok(c.body.usage.completion_tokens >= 9 && c.body.usage.completion_tokens <= 10);
  let text = '';
  for await (const ch of await oai.chat.completions.create({ model: 'm', messages, max_tokens: 30, stream: true, lark: CALC, ...G }))
    for (const x of ch.choices) text += x.delta.content ?? '';
  assert.equal(text, CALC_TEXT);
  const r = await post('/v1/responses', { input: 'What is 6*7?', max_output_tokens: 30, lark: CALC, ...G });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.output[0].content[0].text, CALC_TEXT);
  let rt = '';
  for await (const ev of await oai.responses.create({ model: 'm', input: 'What is 6*7?', max_output_tokens: 30, stream: true, lark: CALC, ...G }))
    if (ev.type === 'response.output_text.delta') rt += ev.delta;
  assert.equal(rt, CALC_TEXT);
  const m = await post('/v1/messages', { model: 'm', max_tokens: 30, messages, lark: CALC, ...G });
  assert.equal(m.status, 200, JSON.stringify(m.body));
  assert.equal(m.body.content[0].text, CALC_TEXT);
  assert.equal(m.body.stop_reason, 'end_turn');
  const st = await ant.messages.stream({ model: 'm', max_tokens: 30, messages, lark: CALC, ...G }).finalMessage();
  assert.equal(st.content[0].text, CALC_TEXT);
  // raw completions too (the calculator belongs to the model's convention, not to chat)
  const k = await post('/v1/completions', { prompt: 'q', max_tokens: 30, lark: CALC, ...G });
  assert.equal(k.body.choices[0].text, CALC_TEXT);
});

test('calculator: no answer forces nothing; a string .count(); history with the markers is accepted', async () => {
  let c = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'q' }], max_tokens: 30, ...G,
    lark: 'start: <|python_start|> "import os" <|python_end|> "x"' });
  assert.equal(c.body.choices[0].message.content, '<|python_start|>import os<|python_end|>x');
  c = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'q' }], max_tokens: 40, ...G,
    lark: 'start: <|python_start|> "\'strawberry\'.count(\'r\')" <|python_end|> "x"' });
  assert.equal(c.body.choices[0].message.content,
    "<|python_start|>'strawberry'.count('r')<|python_end|><|output_start|>3<|output_end|>x");
  // the reply sent back: its markers render as the special tokens again (4 tokens, not 4 x 16 bytes)
  const hist = [{ role: 'user', content: 'q' }, { role: 'assistant', content: CALC_TEXT }, { role: 'user', content: 'ok' }];
  const h = await oai.chat.completions.create({ model: 'm', messages: hist, max_tokens: 1, ...G });
  const broken = hist.map((x) => ({ ...x, content: x.content.replaceAll('|>', '| >') }));
  const b = await oai.chat.completions.create({ model: 'm', messages: broken, max_tokens: 1, ...G });
  assert.ok(h.usage.prompt_tokens + 40 < b.usage.prompt_tokens, `${h.usage.prompt_tokens} vs ${b.usage.prompt_tokens}`);
});

// The KV rings (docs/kv-ring.md): the server's default context is sequence_len 256, so the three S
// layers and the row tokens are 128-row rings. A conversation longer than a ring is spilled to the
// disk tier by another one (one slot), restored with its whole prompt but the last token reused, and
// answers as it did cold; a request sharing only its first tokens finds them overwritten in the
// rings (cached 0, not the shared prefix) and answers as it does from an unrelated slot.
test('KV rings: a conversation past the ring spills, restores and answers as cold; an overwritten prefix is not reused', async () => {
  const kvdir = fs.mkdtempSync(path.join(os.tmpdir(), 'lms-nanochat-kv-'));
  const s = await startServer(['--batch', '1', '--kv-slots', '1', '--kv-cache-dir', kvdir], { model: dir });
  try {
    const c = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const ask = async (content, n = 8) => {
      const r = await c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content }], max_tokens: n, ...G });
      return { text: r.choices[0].message.content, cached: r.usage.prompt_tokens_details.cached_tokens, prompt: r.usage.prompt_tokens };
    };
    const words = 'the sea is wide and deep, the ships sail on it by day and by night; ';
    const A = words.repeat(2) + words.slice(0, 50) + 'what next?', B = words.slice(0, 20) + 'something else entirely', X = 'unrelated';
    const coldA = await ask(A);
    assert.ok(coldA.prompt > 150, `the prompt (${coldA.prompt} tokens) must be longer than the 128-row ring`);
    assert.equal((await ask(A)).cached, coldA.prompt - 1, 'the slot continues past the wrapped ring');
    await ask(X, 1); // evicts A: spilled
    const r = await ask(A); // restored from the sidecar
    assert.equal(r.cached, coldA.prompt - 1, s.log());
    assert.equal(r.text, coldA.text, 'the restored rings give the cold answer');
    const b1 = await ask(B); // shares A's first tokens, whose windows the rings overwrote
    assert.equal(b1.cached, 0, 'a prefix the rings no longer hold is dropped');
    await ask(X, 1);
    const b2 = await ask(B);
    assert.equal(b2.text, b1.text);
    assert.match(s.log(), /kv disk: spilled/);
    assert.doesNotMatch(s.log(), /kv disk: (writing|refused)/);
  } finally {
    assert.equal((await s.stop()).code, 0, s.log());
    fs.rmSync(kvdir, { recursive: true, force: true });
  }
});
