// POST /v1/embeddings through the OpenAI SDK (issue 17 item 7): mean-pooled final hidden states,
// L2-normalized, float and base64, several inputs per request, token-id inputs, errors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './harness.mjs';

let srv, chunked, oai, oaiChunked;

before(async () => {
  srv = await startServer();
  chunked = await startServer(['--prefill-chunk', '3']);
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  oaiChunked = new OpenAI({ baseURL: `${chunked.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  assert.equal((await srv.stop()).code, 0, srv.log());
  assert.equal((await chunked.stop()).code, 0, chunked.log());
});

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const maxDiff = (a, b) => Math.max(...a.map((x, i) => Math.abs(x - b[i])));
const post = async (body) => {
  const r = await fetch(`${srv.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
};
const TEXT = 'The quick brown fox jumps over the lazy dog.';

test('embeddings: float and base64 (the SDK default) agree; unit length; usage', async () => {
  const f = await oai.embeddings.create({ model: 'm', input: TEXT, encoding_format: 'float' });
  assert.equal(f.object, 'list');
  assert.equal(f.data.length, 1);
  assert.equal(f.data[0].object, 'embedding');
  assert.equal(f.data[0].index, 0);
  const v = f.data[0].embedding;
  assert.ok(v.length >= 8 && v.every(Number.isFinite));
  assert.ok(Math.abs(norm(v) - 1) < 1e-5, `norm ${norm(v)}`);
  const ids = (await (await fetch(`${srv.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content: TEXT }) })).json()).tokens;
  assert.equal(f.usage.prompt_tokens, ids.length);
  assert.equal(f.usage.total_tokens, ids.length);
  const b = await oai.embeddings.create({ model: 'm', input: TEXT }); // SDK asks base64, decodes
  assert.equal(b.data[0].embedding.length, v.length);
  assert.ok(maxDiff(b.data[0].embedding, v) < 1e-6);
  const raw = await post({ input: TEXT, encoding_format: 'base64' });
  const bytes = Buffer.from(raw.json.data[0].embedding, 'base64');
  const dec = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  assert.equal(dec.length, v.length);
  assert.ok(maxDiff([...dec], v) < 1e-6);
});

test('embeddings: a batch equals one request per input; ids equal text; chunked prefill equals one pass', async () => {
  const inputs = ['Hello world', TEXT, 'Ünïcödé ☃ text'];
  const batch = await oai.embeddings.create({ model: 'm', input: inputs, encoding_format: 'float' });
  assert.deepEqual(batch.data.map((d) => d.index), [0, 1, 2]);
  for (let i = 0; i < inputs.length; i++) {
    const one = await oai.embeddings.create({ model: 'm', input: inputs[i], encoding_format: 'float' });
    assert.ok(maxDiff(one.data[0].embedding, batch.data[i].embedding) < 1e-6, `input ${i}`);
  }
  assert.ok(maxDiff(batch.data[0].embedding, batch.data[1].embedding) > 1e-3, 'different texts differ');
  const ids = (await (await fetch(`${srv.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content: TEXT }) })).json()).tokens;
  const byIds = await oai.embeddings.create({ model: 'm', input: [ids, ids.slice(0, 3)], encoding_format: 'float' });
  assert.ok(maxDiff(byIds.data[0].embedding, batch.data[1].embedding) < 1e-6);
  const single = await oai.embeddings.create({ model: 'm', input: ids, encoding_format: 'float' });
  assert.ok(maxDiff(single.data[0].embedding, batch.data[1].embedding) < 1e-6);
  // the same input computed 3 tokens at a time (--prefill-chunk 3): the forward pass is batch
  // invariant, so pooling over chunks gives the same vector
  const c = await oaiChunked.embeddings.create({ model: 'm', input: TEXT, encoding_format: 'float' });
  assert.ok(maxDiff(c.data[0].embedding, batch.data[1].embedding) < 1e-5);
});

test('embeddings: generation after an embedding is unaffected (the slot it used is forgotten)', async () => {
  const ask = { model: 'm', messages: [{ role: 'user', content: TEXT }], max_tokens: 6, temperature: 0 };
  const a = await oai.chat.completions.create(ask);
  await oai.embeddings.create({ model: 'm', input: 'something else entirely', encoding_format: 'float' });
  const b = await oai.chat.completions.create(ask);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

test('embeddings: rejected inputs name the param', async () => {
  for (const [body, param] of [[{ input: 'x', dimensions: 8 }, 'dimensions'], [{ input: 'x', encoding_format: 'int8' }, 'encoding_format'],
    [{}, 'input'], [{ input: [] }, 'input'], [{ input: [[]] }, 'input'], [{ input: [1, 'a'] }, 'input'], [{ input: [99999999] }, 'input'],
    [{ input: [{ a: 1 }] }, 'input'], [{ input: '' }, 'input']]) {
    const r = await post(body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.json)}`);
    assert.equal(r.json.error.param, param, JSON.stringify(body));
  }
  await assert.rejects(oai.embeddings.create({ model: 'm', input: 'x', dimensions: 4 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');
});
