// Issue 19 item 4 on the trained demo model (the model `make run` serves): the case that failed
// with the Vercel AI SDK's generateObject and LangChain's withStructuredOutput — a two-field
// schema (name <= 10 characters, age 0..120) — finishes well inside the token budget with JSON
// that parses and validates, with whitespace only as single spaces after `,` and `:` (the
// default), in all three dialects, greedy and sampled.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, jsonGaps as gaps } from './harness.mjs';

const DEMO = fs.readdirSync('models').filter((f) => /^lmserve-demo-.*-q8_0\.gguf$/.test(f)).map((f) => `models/${f}`);
const SCHEMA = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
  required: ['name', 'age'],
  additionalProperties: false,
};
const USER = [{ role: 'user', content: 'Give me a person as JSON with a name and an age.' }];
let srv, oai, ant;

before(async () => {
  assert.equal(DEMO.length, 1, `one committed demo model expected in models/, found ${DEMO.join(', ')}`);
  srv = await startServer([], { model: DEMO[0] });
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => { assert.equal((await srv.stop()).code, 0, srv.log()); });


function check(text, finished, where) {
  assert.ok(finished, `${where}: the reply ran to the token budget: ${JSON.stringify(text)}`);
  for (const [ws, before] of gaps(text)) {
    assert.equal(ws, ' ', `${where}: whitespace run ${JSON.stringify(ws)} in ${text}`);
    assert.ok(before === ',' || before === ':', `${where}: a space after ${before} in ${text}`);
  }
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).sort(), ['age', 'name'], text);
  assert.ok(typeof v.name === 'string' && [...v.name].length <= 10, text);
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120, text);
}

// At most ~90 tokens fit the schema ({"name": <= 10 characters, "age": <= 3 digits} even one
// byte a token, with \u escapes): 200 leaves no room to pad.
const BUDGET = 200;
const SAMPLING = [{ temperature: 0 }, { temperature: 1, seed: 1 }, { temperature: 1, seed: 2 }, { temperature: 1.5, seed: 3 }];

test('chat completions: response_format json_schema on the demo model is tidy, finished, valid', async () => {
  for (const s of SAMPLING) {
    const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: BUDGET, ...s,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMA, strict: true } } });
    check(r.choices[0].message.content, r.choices[0].finish_reason === 'stop', `chat ${JSON.stringify(s)}`);
  }
});

test('responses: text.format json_schema on the demo model is tidy, finished, valid (streamed too)', async () => {
  for (const s of SAMPLING) {
    const body = { model: 'm', input: USER, max_output_tokens: BUDGET, ...s,
      text: { format: { type: 'json_schema', name: 'person', schema: SCHEMA, strict: true } } };
    const r = await oai.responses.create(body);
    check(r.output_text, r.status === 'completed', `responses ${JSON.stringify(s)}`);
    // (the stream helper's final response does not fill output_text: read the parts)
    const f = await oai.responses.stream(body).finalResponse();
    const streamed = f.output.flatMap((o) => o.content ?? []).filter((c) => c.type === 'output_text').map((c) => c.text).join('');
    assert.equal(streamed, r.output_text, 'the same reply streamed');
  }
});

test('messages: output_config json_schema on the demo model is tidy, finished, valid', async () => {
  for (const s of SAMPLING) {
    // (Anthropic's temperature range is [0, 1])
    const m = await ant.messages.create({ model: 'm', messages: USER, max_tokens: BUDGET, ...s,
      temperature: Math.min(s.temperature, 1), output_config: { format: { type: 'json_schema', schema: SCHEMA } } });
    check(m.content.find((b) => b.type === 'text').text, m.stop_reason === 'end_turn', `messages ${JSON.stringify(s)}`);
  }
});
