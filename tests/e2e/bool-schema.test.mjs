// Boolean JSON Schemas (issue 10 item 2) wherever a schema is accepted: chat response_format
// json_schema, Responses text.format, Anthropic output_config.format, and tool parameters in all
// three dialects (auto and forced). `true` is any JSON value (any object for tool arguments);
// `false` matches nothing, so it is a 400 invalid_request_error naming the param. Both used to be
// a 500 "out of memory" (json_dumps of a bare boolean), which the SDKs retry.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer } from './harness.mjs';

let srv, oai, ant;
before(async () => {
  srv = await startServer(['--threads', '1']);
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => assert.deepEqual(await srv.stop(), { code: 0, sig: null }, srv.log()));

const USER = [{ role: 'user', content: 'Give me some JSON.' }];

test('schema true: any JSON value (chat, responses, messages)', async () => {
  const c = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 24, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'any', schema: true } } });
  assert.equal(c.object, 'chat.completion');
  if (c.choices[0].finish_reason === 'stop') JSON.parse(c.choices[0].message.content);
  const r = await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 24, temperature: 0,
    text: { format: { type: 'json_schema', name: 'any', schema: true } } });
  assert.equal(r.status === 'completed' || r.status === 'incomplete', true, r.status);
  if (r.status === 'completed') JSON.parse(r.output_text);
  const m = await ant.messages.create({ model: 'm', messages: USER, max_tokens: 24, temperature: 0,
    output_config: { format: { type: 'json_schema', schema: true } } });
  assert.equal(m.type, 'message');
  if (m.stop_reason === 'end_turn') JSON.parse(m.content[0].text);
  // the same through a stream
  const s = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'any', schema: true } } });
  let n = 0;
  for await (const ch of s) n += ch.choices.length;
  assert.ok(n > 0);
});

test('schema false: 400 invalid_request_error naming the param', async () => {
  const bad = (e, param) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
    e.error?.type === 'invalid_request_error' && e.param === param && /false/.test(e.message);
  await assert.rejects(oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'none', schema: false } } }),
  (e) => bad(e, 'response_format.json_schema.schema'));
  await assert.rejects(oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 4, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'none', schema: false } } }),
  (e) => bad(e, 'response_format.json_schema.schema'));
  await assert.rejects(oai.responses.create({ model: 'm', input: USER, max_output_tokens: 4,
    text: { format: { type: 'json_schema', name: 'none', schema: false } } }),
  (e) => bad(e, 'text.format.schema'));
  await assert.rejects(ant.messages.create({ model: 'm', messages: USER, max_tokens: 4,
    output_config: { format: { type: 'json_schema', schema: false } } }),
  (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error' &&
    /output_config\.format\.schema/.test(e.message));
});

test('tool parameters true / false in every dialect, auto and forced', async () => {
  const fnT = { type: 'function', function: { name: 'f', parameters: true } };
  for (const tool_choice of ['auto', 'required']) {
    const c = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 16, tools: [fnT], tool_choice });
    assert.equal(c.object, 'chat.completion');
    for (const tc of c.choices[0].message.tool_calls ?? [])
      assert.equal(typeof JSON.parse(tc.function.arguments), 'object', 'forced arguments are an object');
    const r = await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 16,
      tools: [{ type: 'function', name: 'f', parameters: true }], tool_choice });
    assert.equal(r.object, 'response');
    const m = await ant.messages.create({ model: 'm', messages: USER, max_tokens: 16,
      tools: [{ name: 'f', input_schema: true }], tool_choice: { type: tool_choice === 'auto' ? 'auto' : 'any' } });
    assert.equal(m.type, 'message');
  }
  await assert.rejects(oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 4,
    tools: [{ type: 'function', function: { name: 'f', parameters: false } }] }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].function.parameters');
  await assert.rejects(oai.responses.create({ model: 'm', input: USER, max_output_tokens: 4,
    tools: [{ type: 'function', name: 'f', parameters: false }], tool_choice: 'required' }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].parameters');
  await assert.rejects(ant.messages.create({ model: 'm', messages: USER, max_tokens: 4,
    tools: [{ name: 'f', input_schema: false }] }),
  (e) => e instanceof Anthropic.BadRequestError && /tools\[0\]\.input_schema/.test(e.message));
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
});
