// Constraints through the real decoding path: response_format / text.format / output_config.format
// (JSON Schema), json_object, and the regex / lark extensions; and, forced by a constraint, a reply
// that opens with <think>…</think>, routed to each dialect's reasoning channel (R-THINK-1).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, USER } from './harness.mjs';

let srv, oai, ant;
before(async () => {
  srv = await startServer();
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => assert.equal((await srv.stop()).code, 0, srv.log()));

const THINK = '<think>\nLet me see\\.\n</think>\n\nThe answer is (yes|no)\\.';
const thinkRe = /^The answer is (yes|no)\.$/;

test('a forced <think> head routes to reasoning_content (chat, create and stream)', async () => {
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 60, regex: THINK });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, 'Let me see.');
  assert.match(m.content, thinkRe);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.completion_tokens_details.reasoning_tokens > 0);
  let reasoning = '', content = '';
  for await (const c of await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 60, regex: THINK, stream: true })) {
    reasoning += c.choices[0]?.delta?.reasoning_content ?? '';
    content += c.choices[0]?.delta?.content ?? '';
  }
  assert.equal(reasoning, 'Let me see.');
  assert.match(content, thinkRe);
});

test('a forced <think> head is a reasoning item (responses, create and stream)', async () => {
  const r = await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 60, regex: THINK });
  assert.equal(r.status, 'completed');
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].text, 'Let me see.');
  assert.match(r.output_text, thinkRe);
  const s = oai.responses.stream({ model: 'm', input: USER, max_output_tokens: 60, regex: THINK });
  const types = [];
  s.on('event', (e) => types.push(e.type));
  const fin = await s.finalResponse();
  assert.ok(types.includes('response.reasoning_text.delta'));
  assert.ok(types.indexOf('response.reasoning_text.delta') < types.indexOf('response.output_text.delta'));
  assert.deepEqual(fin.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(fin.output[0].content[0].text, 'Let me see.');
});

test('a forced <think> head is a thinking block (messages, create and stream)', async () => {
  // greedy: create and stream are compared below, and an unseeded sampled reply may pick yes or no
  const params = { model: 'm', messages: USER, max_tokens: 60, regex: THINK, temperature: 0 };
  const m = await ant.messages.create(params);
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, 'Let me see.');
  assert.match(m.content[1].text, thinkRe);
  assert.equal(m.stop_reason, 'end_turn');
  const stream = ant.messages.stream(params);
  const deltas = [];
  stream.on('streamEvent', (e) => { if (e.type === 'content_block_delta') deltas.push(e.delta.type); });
  const fin = await stream.finalMessage();
  assert.deepEqual(fin.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(fin.content[0].thinking, 'Let me see.');
  assert.equal(fin.content[1].text, m.content[1].text);
  assert.ok(deltas.includes('signature_delta'), 'thinking block closed by a signature_delta');
});

// bounded, so even a random model must finish well within max_tokens (an unbounded integer can
// run on digits forever)
const SCHEMA = { type: 'object', properties: { n: { type: 'integer', minimum: -1000, maximum: 1000 }, ok: { type: 'boolean' } }, required: ['n', 'ok'], additionalProperties: false };
function checkSchema(text) {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).sort(), ['n', 'ok']);
  assert.ok(Number.isInteger(v.n));
  assert.equal(typeof v.ok, 'boolean');
}

test('json_schema in all three dialects yields valid JSON for the schema', async () => {
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: SCHEMA, strict: true } } });
  assert.equal(r.choices[0].finish_reason, 'stop');
  checkSchema(r.choices[0].message.content);
  const p = await oai.chat.completions.parse({ model: 'm', messages: USER, max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: SCHEMA, strict: true } } });
  assert.equal(typeof p.choices[0].message.parsed.n, 'number');
  const rr = await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 200, text: { format: { type: 'json_schema', name: 'x', schema: SCHEMA, strict: true } } });
  checkSchema(rr.output_text);
  const m = await ant.messages.create({ model: 'm', messages: USER, max_tokens: 200, output_config: { format: { type: 'json_schema', schema: SCHEMA } } });
  checkSchema(m.content.find((b) => b.type === 'text').text);
  const j = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 200, response_format: { type: 'json_object' } });
  assert.equal(typeof JSON.parse(j.choices[0].message.content), 'object');
});

test('lark grammar and regex; max_tokens still bounds an unbounded grammar', async () => {
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 20, lark: 'start: "yes" | "no"' });
  assert.ok(['yes', 'no'].includes(r.choices[0].message.content));
  // 200 letters cannot fit in 5 tokens: the budget ends the reply, not the grammar
  const b = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 5, regex: '[ab]{200}' });
  assert.equal(b.choices[0].finish_reason, 'length');
  assert.match(b.choices[0].message.content, /^[ab]+$/);
  assert.equal(b.usage.completion_tokens, 5);
});

test('a stop string inside a forced reply stops before it (stop_sequence attribution)', async () => {
  const regex = 'alpha beta STOP gamma';
  const c = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 40, regex, stop: ['STOP'] });
  assert.equal(c.choices[0].message.content, 'alpha beta ');
  assert.equal(c.choices[0].finish_reason, 'stop');
  let streamed = '';
  for await (const ch of await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 40, regex, stop: ['STOP', 'zzz'], stream: true }))
    streamed += ch.choices[0]?.delta?.content ?? '';
  assert.equal(streamed, 'alpha beta ');
  const m = await ant.messages.create({ model: 'm', messages: USER, max_tokens: 40, regex, stop_sequences: ['zzz', 'STOP'] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, 'STOP');
  assert.equal(m.content[0].text, 'alpha beta ');
});

test('invalid grammars are a 400 naming the param', async () => {
  await assert.rejects(oai.chat.completions.create({ model: 'm', messages: USER, regex: '(unclosed' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'regex');
  await assert.rejects(oai.chat.completions.create({ model: 'm', messages: USER, lark: 'start: undefined_rule' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'lark');
  await assert.rejects(oai.responses.create({ model: 'm', input: 'hi', text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { a: { type: 'nonsense' } } } } } }),
    (e) => e.status === 400 && e.param === 'text.format');
  await assert.rejects(oai.chat.completions.create({ model: 'm', messages: USER, regex: 'a', lark: 'start: "a"' }),
    (e) => e instanceof OpenAI.BadRequestError);
});
