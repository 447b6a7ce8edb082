// Empty replies (issue 10 item 1): a reply whose first sampled token ends the turn must come back
// well-formed and empty in every dialect and mode — it used to kill the server (the emitter
// touched its never-allocated pending buffer). The reply is forced empty by a grammar that only
// allows end-of-turn (regex "", regex "^$", lark <|endoftext|>*) or, for the unconstrained paths
// (reasoning on, the issue's own request), by repeat_penalty 0.01 on "stop seven": on the seeded
// test model that makes <|im_end|> the greedy first token (asserted: completion_tokens 0).
// Every case then checks the server is still up; after() checks it exits cleanly (0, no signal).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, postRaw, parseSSE } from './harness.mjs';

let srv, oai, ant;
before(async () => {
  srv = await startServer(['--threads', '1']);
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  const r = await srv.stop();
  assert.deepEqual(r, { code: 0, sig: null }, srv.log());
});

const USER = [{ role: 'user', content: 'stop seven' }];
const FORCE = [
  ['regex ""', { regex: '' }],
  ['regex ^$', { regex: '^$' }],
  ['lark <|endoftext|>*', { lark: 'start: <[151643]>*' }],
];
const NATURAL = { temperature: 0, repeat_penalty: 0.01 };
const TOOLS_OAI = [{ type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
const TOOLS_RESP = [{ type: 'function', name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }];
const TOOLS_ANT = [{ name: 'get_weather', description: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];

async function alive() {
  const r = await fetch(`${srv.url}/health`);
  assert.equal(r.status, 200, `server down after the request:\n${srv.log().slice(-2000)}`);
}

async function collect(stream) {
  const out = [];
  for await (const ev of stream) out.push(ev);
  return out;
}

// ---- chat completions ----

function chatEmpty(r, n = 1) {
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, n);
  for (const [i, c] of r.choices.entries()) {
    assert.equal(c.index, i);
    assert.equal(c.message.content, '');
    assert.equal(c.finish_reason, 'stop');
  }
  assert.equal(r.usage.completion_tokens, 0);
}

function chatStreamEmpty(chunks, n = 1) {
  assert.ok(chunks.length > 0);
  for (let i = 0; i < n; i++) {
    const mine = chunks.flatMap((c) => c.choices.filter((x) => x.index === i));
    assert.equal(mine.map((x) => x.delta?.content ?? '').join(''), '', `choice ${i} text`);
    assert.deepEqual(mine.filter((x) => x.finish_reason).map((x) => x.finish_reason), ['stop'], `choice ${i} finish`);
  }
}

for (const [name, force] of FORCE) {
  test(`chat: ${name}, non-stream and stream`, async () => {
    chatEmpty(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, ...force }));
    await alive();
    chatStreamEmpty(await collect(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, stream: true, ...force })));
    await alive();
  });
}

test('chat: the issue\'s request (repeat_penalty 0.01, no constraint), non-stream and stream', async () => {
  chatEmpty(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, ...NATURAL }));
  await alive();
  const chunks = await collect(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, stream: true, stream_options: { include_usage: true }, ...NATURAL }));
  chatStreamEmpty(chunks);
  assert.equal(chunks.at(-1).usage.completion_tokens, 0);
  await alive();
});

test('chat: reasoning on (reasoning_effort high), first token ends the turn', async () => {
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, reasoning_effort: 'high', ...NATURAL });
  chatEmpty(r);
  assert.equal(r.choices[0].message.reasoning_content ?? '', '');
  await alive();
  const chunks = await collect(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, stream: true, reasoning_effort: 'high', ...NATURAL }));
  chatStreamEmpty(chunks);
  assert.equal(chunks.flatMap((c) => c.choices.map((x) => x.delta?.reasoning_content ?? '')).join(''), '');
  await alive();
});

test('chat: n = 3, non-stream and stream', async () => {
  chatEmpty(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, n: 3, regex: '' }), 3);
  await alive();
  chatStreamEmpty(await collect(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, n: 3, stream: true, regex: '' })), 3);
  await alive();
});

test('chat: logprobs + top_logprobs, non-stream and stream', async () => {
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, logprobs: true, top_logprobs: 3, regex: '' });
  chatEmpty(r);
  assert.deepEqual(r.choices[0].logprobs.content, []);
  await alive();
  const chunks = await collect(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, logprobs: true, top_logprobs: 3, stream: true, ...NATURAL }));
  chatStreamEmpty(chunks);
  assert.deepEqual(chunks.flatMap((c) => c.choices.flatMap((x) => x.logprobs?.content ?? [])), []);
  await alive();
});

test('chat: stop strings, non-stream and stream', async () => {
  chatEmpty(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, stop: ['a', '</'], regex: '' }));
  await alive();
  chatStreamEmpty(await collect(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, stop: ['a'], stream: true, ...NATURAL })));
  await alive();
});

test('chat: tool scanning on (tools given), non-stream and stream', async () => {
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, tools: TOOLS_OAI, regex: '' });
  chatEmpty(r);
  assert.ok(!r.choices[0].message.tool_calls?.length);
  await alive();
  const chunks = await collect(await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, tools: TOOLS_OAI, stream: true, n: 2, logprobs: true, regex: '^$' }));
  chatStreamEmpty(chunks, 2);
  await alive();
});

test('chat: raw HTTP stream ends with [DONE] and a chunk terminator', async () => {
  const r = await postRaw(srv.port, '/v1/chat/completions', JSON.stringify({ messages: USER, max_tokens: 8, stream: true, lark: 'start: <[151643]>*' }));
  assert.equal(r.status, 200);
  const ev = parseSSE(r.body.replace(/^[0-9a-f]+\r\n|\r\n[0-9a-f]+\r\n/gi, ''));
  assert.equal(ev.at(-1).data, '[DONE]');
  await alive();
});

// ---- responses ----

function respEmpty(r) {
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  // output_text is the SDK's convenience on non-stream replies; the parts themselves for both
  const text = r.output.filter((o) => o.type === 'message').flatMap((o) => o.content).filter((c) => c.type === 'output_text').map((c) => c.text).join('');
  assert.equal(text, '');
  if ('output_text' in r) assert.equal(r.output_text, '');
  assert.ok(!r.output.some((o) => o.type === 'function_call'));
  assert.equal(r.usage.output_tokens, 0);
}

async function respStreamEmpty(stream) {
  const ev = await collect(stream);
  const types = ev.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  assert.ok(!types.includes('error') && !types.includes('response.failed'), types.join());
  const done = ev.at(-1).response;
  respEmpty(done);
  assert.equal(ev.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join(''), '');
  return ev;
}

for (const [name, force] of FORCE) {
  test(`responses: ${name}, non-stream and stream`, async () => {
    respEmpty(await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 8, ...force }));
    await alive();
    await respStreamEmpty(await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 8, stream: true, ...force }));
    await alive();
  });
}

test('responses: reasoning on (effort high) with logprobs and stop, no constraint', async () => {
  const extra = { reasoning: { effort: 'high' }, include: ['message.output_text.logprobs'], top_logprobs: 2, stop: ['a'], ...NATURAL };
  respEmpty(await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 8, ...extra }));
  await alive();
  await respStreamEmpty(await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 8, stream: true, ...extra }));
  await alive();
});

test('responses: tools, logprobs, stop — non-stream and stream', async () => {
  const extra = { include: ['message.output_text.logprobs'], top_logprobs: 2, tools: TOOLS_RESP, stop: ['a'], regex: '' };
  respEmpty(await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 8, ...extra }));
  await alive();
  await respStreamEmpty(await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 8, stream: true, ...extra }));
  await alive();
});

// ---- anthropic messages ----

function msgEmpty(m) {
  assert.equal(m.type, 'message');
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), '');
  assert.ok(!m.content.some((b) => b.type === 'tool_use'));
  assert.equal(m.usage.output_tokens, 0);
}

async function msgStreamEmpty(params) {
  const s = ant.messages.stream(params);
  const types = [];
  s.on('streamEvent', (e) => types.push(e.type));
  const m = await s.finalMessage();
  msgEmpty(m);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
}

for (const [name, force] of FORCE) {
  test(`messages: ${name}, non-stream and stream`, async () => {
    msgEmpty(await ant.messages.create({ model: 'm', messages: USER, max_tokens: 8, ...force }));
    await alive();
    await msgStreamEmpty({ model: 'm', messages: USER, max_tokens: 8, ...force });
    await alive();
  });
}

test('messages: tools, stop_sequences, thinking enabled — non-stream and stream', async () => {
  const extra = { tools: TOOLS_ANT, stop_sequences: ['a'], regex: '' };
  msgEmpty(await ant.messages.create({ model: 'm', messages: USER, max_tokens: 8, ...extra }));
  await alive();
  await msgStreamEmpty({ model: 'm', messages: USER, max_tokens: 8, ...extra });
  await alive();
  const think = { thinking: { type: 'enabled', budget_tokens: 1024 }, max_tokens: 2048 };
  msgEmpty(await ant.messages.create({ model: 'm', messages: USER, ...think, ...extra }));
  await alive();
  await msgStreamEmpty({ model: 'm', messages: USER, ...think, ...extra });
  await alive();
});
