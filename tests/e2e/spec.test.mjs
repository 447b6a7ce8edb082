// --spec (R-SPEC-1, docs/speculation.md): speculative decoding from the request's own context
// changes nothing a client can see. A server with --spec 8 and a plain one, on the committed
// trained demo model (random weights accept no drafts), give byte-identical replies — text and
// every logprob bit — in all three dialects, streamed and not, with stop strings, across a
// slot-reuse follow-up turn (same cached_tokens), for seeded sampling, n = 2 and a JSON-schema
// constraint. The spec server's debug log must show drafts accepted and rejected, or the
// comparison would prove nothing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer } from './harness.mjs';

const DEMO = 'models/lmserve-demo-qwen3-3m-q8_0.gguf';
const PASSAGE = 'The quick brown fox jumps over the lazy dog. The dog sleeps in the sun while the fox ' +
  'runs into the forest. The forest is dark and quiet, and the fox is not afraid of the dark.';
const GROUNDED = [{ role: 'user', content: `Repeat this passage exactly: ${PASSAGE}` }];
// a question whose reply is not in the prompt (few drafts accepted) and long enough to compare (> 20
// characters) on every demo model so far ("Tell me about the sea." got 17 characters from run G's models)
const OPEN = [{ role: 'user', content: 'What does ocean mean?' }];
const LP = { logprobs: true, top_logprobs: 2 };
let plain, spec, specb;
const cl = {};

before(async () => {
  plain = await startServer(['--kv-slots', '1', '--threads', '2'], { model: DEMO });
  spec = await startServer(['--kv-slots', '1', '--threads', '2', '--spec', '8', '--log-level', 'debug'], { model: DEMO });
  specb = await startServer(['--batch', '4', '--threads', '2', '--spec', '8', '--log-level', 'debug'], { model: DEMO });
  for (const [k, s] of [['plain', plain], ['spec', spec]]) {
    cl[k] = {
      oai: new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0 }),
      ant: new Anthropic({ baseURL: s.url, apiKey: 'x', maxRetries: 0 }),
    };
  }
});
after(async () => {
  const stats = [...spec.log().matchAll(/spec: (\d+) verifies, (\d+) of (\d+) drafts accepted/g)];
  const acc = stats.reduce((a, m) => a + Number(m[2]), 0), prop = stats.reduce((a, m) => a + Number(m[3]), 0);
  assert.equal((await plain.stop()).code, 0, plain.log());
  assert.equal((await spec.stop()).code, 0, spec.log());
  assert.equal((await specb.stop()).code, 0, specb.log());
  // the comparisons above ran through accepted and rejected drafts
  assert.ok(acc > 20, `drafts accepted: ${acc} of ${prop}`);
  assert.ok(prop - acc > 5, `drafts rejected: ${prop - acc} of ${prop}`);
});

// runs fn against both servers (plain first) and compares what it returns
async function both(fn, what) {
  const a = await fn(cl.plain), b = await fn(cl.spec);
  assert.deepEqual(b, a, `${what}: --spec differs from plain`);
  return a;
}

for (const [name, messages] of [['grounded', GROUNDED], ['open chat', OPEN]]) {
  test(`chat completions (${name}): greedy text and logprobs equal, streamed or not`, async () => {
    const r = await both(async ({ oai }) => {
      const c = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 80, temperature: 0, ...LP });
      return { text: c.choices[0].message.content, lp: JSON.stringify(c.choices[0].logprobs), fin: c.choices[0].finish_reason, usage: c.usage };
    }, 'chat');
    assert.ok(r.text.length > 20);
    await both(async ({ oai }) => {
      let t = '';
      for await (const ch of await oai.chat.completions.create({ model: 'm', messages, max_tokens: 80, temperature: 0, stream: true }))
        t += ch.choices[0]?.delta?.content ?? '';
      return t;
    }, 'chat stream');
  });
}

test('responses and messages: greedy text equal, streamed or not', async () => {
  await both(async ({ oai }) => {
    const r = await oai.responses.create({ model: 'm', input: GROUNDED, max_output_tokens: 70, temperature: 0 });
    const s = await oai.responses.stream({ model: 'm', input: GROUNDED, max_output_tokens: 70, temperature: 0 }).finalResponse();
    return [r.output_text, s.output.find((o) => o.type === 'message').content[0].text, r.usage];
  }, 'responses');
  await both(async ({ ant }) => {
    const m = await ant.messages.create({ model: 'm', messages: GROUNDED, max_tokens: 70, temperature: 0 });
    const s = await ant.messages.stream({ model: 'm', messages: GROUNDED, max_tokens: 70, temperature: 0 }).finalMessage();
    return [m.content.map((b) => b.text ?? '').join(''), s.content.map((b) => b.text ?? '').join(''), m.stop_reason, m.usage];
  }, 'messages');
});

test('stop strings: the same cut in every dialect', async () => {
  const full = (await cl.plain.oai.chat.completions.create({ model: 'm', messages: GROUNDED, max_tokens: 80, temperature: 0 })).choices[0].message.content;
  const stop = full.slice(Math.floor(full.length / 2), Math.floor(full.length / 2) + 5);
  assert.ok(stop.length === 5, full);
  const r = await both(async ({ oai, ant }) => {
    const c = await oai.chat.completions.create({ model: 'm', messages: GROUNDED, max_tokens: 80, temperature: 0, stop: [stop] });
    const rr = await oai.responses.create({ model: 'm', input: GROUNDED, max_output_tokens: 80, temperature: 0, stop: [stop] });
    const m = await ant.messages.create({ model: 'm', messages: GROUNDED, max_tokens: 80, temperature: 0, stop_sequences: [stop] });
    return [c.choices[0].message.content, c.choices[0].finish_reason, rr.output_text, m.content.map((b) => b.text ?? '').join(''), m.stop_reason];
  }, 'stop');
  assert.equal(r[1], 'stop');
  assert.ok(full.startsWith(r[0]) && r[0].length < full.length);
});

test('a slot-reuse follow-up turn: same reply and cached_tokens', async () => {
  await both(async ({ oai }) => {
    const a = await oai.chat.completions.create({ model: 'm', messages: GROUNDED, max_tokens: 60, temperature: 0, ...LP });
    const turn2 = [...GROUNDED, { role: 'assistant', content: a.choices[0].message.content },
      { role: 'user', content: `Now repeat it once more: ${PASSAGE}` }];
    const b = await oai.chat.completions.create({ model: 'm', messages: turn2, max_tokens: 60, temperature: 0, ...LP });
    assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0, 'the follow-up reuses the slot');
    return [a.choices[0].message.content, b.choices[0].message.content, JSON.stringify(b.choices[0].logprobs), b.usage];
  }, 'follow-up');
});

test('seeded sampling and n = 2: the same tokens (the target draws as it would without drafts)', async () => {
  await both(async ({ oai }) => {
    const c = await oai.chat.completions.create({ model: 'm', messages: GROUNDED, max_tokens: 60, temperature: 0.8, top_p: 0.95, seed: 7, n: 2 });
    return c.choices.map((x) => x.message.content);
  }, 'sampling');
});

test('a JSON-schema constraint: drafts filtered through the grammar, the same reply', async () => {
  const schema = { type: 'object', properties: { fox: { type: 'string' }, dog: { type: 'string' } }, required: ['fox', 'dog'], additionalProperties: false };
  const r = await both(async ({ oai }) => {
    const c = await oai.chat.completions.create({ model: 'm', messages: GROUNDED, max_tokens: 80, temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } });
    return [c.choices[0].message.content, c.choices[0].finish_reason];
  }, 'constrained');
  if (r[1] === 'stop') JSON.parse(r[0]);
  // the grammar's forced continuation (keys, punctuation) was drafted and some of it accepted
  const last = [...spec.log().matchAll(/spec: \d+ verifies, \d+ of \d+ drafts accepted, (\d+) of (\d+) grammar drafts/g)].at(-1);
  assert.ok(last && Number(last[1]) > 0, `grammar drafts: ${last?.[0]}`);
});

test('--batch 4 --spec 8: concurrent streams verify their drafts in the batch\'s one forward, replies unchanged', async () => {
  const asks = [GROUNDED, OPEN, [{ role: 'user', content: `Repeat: ${PASSAGE.slice(0, 90)}` }],
    [{ role: 'user', content: 'What does river mean?' }]];
  const body = (messages) => ({ model: 'm', messages, max_tokens: 60, temperature: 0, logprobs: true, top_logprobs: 1 });
  const ref = [];
  for (const m of asks) ref.push((await cl.plain.oai.chat.completions.create(body(m))).choices[0]);
  const oai = new OpenAI({ baseURL: `${specb.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const got = await Promise.all(asks.map((m) => oai.chat.completions.create(body(m)).then((c) => c.choices[0])));
  for (let i = 0; i < asks.length; i++) assert.deepEqual(got[i], ref[i], `request ${i} differs batched with --spec`);
  const shared = [...specb.log().matchAll(/batch: (\d+) verifies shared a step with other streams/g)]
    .reduce((a, m) => a + Number(m[1]), 0);
  // whether the streams overlapped depends on the machine's speed (a quiet machine finishes the
  // demo model's short replies before the next request arrives): reported, not asserted
  console.log(`# verifies that shared a step with other streams: ${shared}`);
});
