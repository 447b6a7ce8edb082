// Client-side problems are 4xx, never 5xx (issue 10 item 8): the official SDKs retry every 5xx
// (twice, with backoff), so a 501 for an image part made the client wait and then fail anyway.
// Unsupported content (images, audio, files, documents), unsupported JSON Schema features and
// forced tools with such schemas must be a 400 invalid_request_error naming the param. The SDKs
// here keep their default retry policy; a counting fetch asserts exactly one request hit the
// server for each case.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer } from './harness.mjs';

let srv, hits = 0;
const counting = (...a) => { hits++; return fetch(...a); };
before(async () => { srv = await startServer(['--threads', '1']); });
after(async () => assert.deepEqual(await srv.stop(), { code: 0, sig: null }, srv.log()));

// default maxRetries (2): a 5xx would show up as 3 hits
const oai = () => new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', fetch: counting });
const ant = () => new Anthropic({ baseURL: srv.url, apiKey: 'x', fetch: counting });

async function once(p, check) {
  hits = 0;
  await assert.rejects(p, (e) => {
    assert.equal(e.status, 400, `status ${e.status}: ${e.message}`);
    check(e);
    return true;
  });
  assert.equal(hits, 1, 'exactly one request reached the server (no retry)');
}
const oaiBad = (param) => (e) => {
  assert.ok(e instanceof OpenAI.BadRequestError, e.constructor.name);
  assert.equal(e.error?.type, 'invalid_request_error');
  assert.equal(e.param, param, e.message);
};
const antBad = (re) => (e) => {
  assert.ok(e instanceof Anthropic.BadRequestError, e.constructor.name);
  assert.equal(e.error?.error?.type, 'invalid_request_error');
  assert.match(e.message, re);
};

const IMG = 'data:image/png;base64,iVBORw0KGgo=';

test('chat: image, audio and file parts are 400 naming the part', async () => {
  const parts = [
    { type: 'image_url', image_url: { url: IMG } },
    { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } },
    { type: 'file', file: { file_data: 'data:application/pdf;base64,AA==', filename: 'a.pdf' } },
  ];
  for (const p of parts) {
    for (const stream of [false, true])
      await once(oai().chat.completions.create({ model: 'm', max_tokens: 4, stream,
        messages: [{ role: 'user', content: [{ type: 'text', text: 'look' }, p] }] }),
      oaiBad('messages[0].content[1].type'));
  }
});

test('responses: input_image, input_file, input_audio are 400 naming the part', async () => {
  const parts = [
    { type: 'input_image', image_url: IMG, detail: 'auto' },
    { type: 'input_file', file_data: 'data:application/pdf;base64,AA==', filename: 'a.pdf' },
    { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } },
  ];
  for (const p of parts)
    for (const stream of [false, true])
      await once(oai().responses.create({ model: 'm', max_output_tokens: 4, stream,
        input: [{ role: 'user', content: [{ type: 'input_text', text: 'look' }, p] }] }),
      oaiBad('input[0].content[1].type'));
});

test('messages: image and document blocks are 400 naming the block', async () => {
  const blocks = [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
    { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'AA==' } },
  ];
  for (const b of blocks)
    for (const stream of [false, true])
      await once(ant().messages.create({ model: 'm', max_tokens: 4, stream,
        messages: [{ role: 'user', content: [{ type: 'text', text: 'look' }, b] }] }),
      antBad(/messages\[0\]\.content\[1\]\.type/));
});

test('unsupported JSON Schema features are 400 naming the param in every dialect', async () => {
  const schema = { type: 'array', items: { type: 'integer' }, uniqueItems: true };
  await once(oai().chat.completions.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
    response_format: { type: 'json_schema', json_schema: { name: 's', schema } } }),
  (e) => { oaiBad('response_format')(e); assert.match(e.message, /uniqueItems/); });
  await once(oai().responses.create({ model: 'm', max_output_tokens: 4, input: 'hi', stream: true,
    text: { format: { type: 'json_schema', name: 's', schema } } }),
  (e) => { oaiBad('text.format')(e); assert.match(e.message, /uniqueItems/); });
  await once(ant().messages.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
    output_config: { format: { type: 'json_schema', schema } } }),
  antBad(/uniqueItems/));
  // a forced tool whose (enforced) schema uses the feature
  await once(ant().messages.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
    tools: [{ name: 'f', input_schema: { type: 'object', properties: { a: schema } } }], tool_choice: { type: 'any' } }),
  antBad(/uniqueItems/));
  await once(oai().chat.completions.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
    tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object', properties: { a: schema } } } }],
    tool_choice: 'required' }),
  (e) => { oaiBad('tool_choice')(e); assert.match(e.message, /uniqueItems/); });
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
});
