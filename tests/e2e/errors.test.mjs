// Error statuses as the SDKs see them (their error classes), keys, and raw-HTTP bad inputs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, postRaw, rawRequest, USER } from './harness.mjs';

const KEY = 'sk-test-0123456789';
let srv;

before(async () => {
  srv = await startServer(['--api-key', KEY, '--max-body', '65536', '--timeout', '2']);
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, srv.log());
});

const oai = (key = KEY) => new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: key, maxRetries: 0 });
const ant = (key = KEY) => new Anthropic({ baseURL: srv.url, apiKey: key, maxRetries: 0 });

test('key via Bearer (openai) and via x-api-key (anthropic); /health needs none', async () => {
  const r = await oai().chat.completions.create({ model: 'm', messages: USER, max_tokens: 2 });
  assert.equal(r.object, 'chat.completion');
  const m = await ant().messages.create({ model: 'm', messages: USER, max_tokens: 2 });
  assert.equal(m.type, 'message');
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
  const x = await fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': KEY },
    body: JSON.stringify({ messages: USER, max_tokens: 1 }),
  });
  assert.equal(x.status, 200);
});

test('401 in each dialect: AuthenticationError with the dialect shape', async () => {
  await assert.rejects(oai('wrong').chat.completions.create({ model: 'm', messages: USER, max_tokens: 2 }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.error?.type === 'authentication_error');
  await assert.rejects(oai(KEY + 'x').responses.create({ model: 'm', input: 'hi' }),
    (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(ant('nope').messages.create({ model: 'm', messages: USER, max_tokens: 2 }),
    (e) => e instanceof Anthropic.AuthenticationError && e.error?.error?.type === 'authentication_error');
  const r = await fetch(`${srv.url}/v1/models`);
  assert.equal(r.status, 401);
});

test('400 names the offending param (BadRequestError)', async () => {
  const cases = [
    [{ temperature: 5 }, 'temperature'],
    [{ logit_bias: { 5: 101 } }, 'logit_bias'],
    [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    [{ max_tokens: 0 }, 'max_tokens'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(oai().chat.completions.create({ model: 'm', messages: USER, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === param && e.error.type === 'invalid_request_error',
      param);
  }
  await assert.rejects(oai().responses.create({ model: 'm', input: 'hi', previous_response_id: 'resp_x' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  await assert.rejects(ant().messages.create({ model: 'm', messages: USER, max_tokens: 2, temperature: 1.5 }),
    (e) => e instanceof Anthropic.BadRequestError && e.error.error.type === 'invalid_request_error' && /temperature/.test(e.message));
  // 400 (never 5xx, which the SDKs retry) for what this build cannot do, naming the param
  await assert.rejects(oai().responses.create({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,AA==' }] }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.type === 'invalid_request_error' && e.param === 'input[0].content[0].type');
});

test('a prompt longer than the context is a 400 in the dialect shape', async () => {
  const small = await startServer(['--ctx', '64']);
  try {
    const long = [{ role: 'user', content: 'word '.repeat(200) }];
    await assert.rejects(new OpenAI({ baseURL: `${small.url}/v1`, apiKey: 'x', maxRetries: 0 }).chat.completions.create({ model: 'm', messages: long, stream: true }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
    await assert.rejects(new Anthropic({ baseURL: small.url, apiKey: 'x', maxRetries: 0 }).messages.create({ model: 'm', messages: long, max_tokens: 5, stream: true }),
      (e) => e instanceof Anthropic.BadRequestError);
  } finally {
    assert.equal((await small.stop()).code, 0);
  }
});

test('404 for unknown paths and models (NotFoundError)', async () => {
  await assert.rejects(oai().models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError);
  const id = (await oai().models.list()).data[0].id;
  assert.equal((await oai().models.retrieve(id)).id, id);
  await assert.rejects(oai().post('/nothing/here', { body: {} }), (e) => e instanceof OpenAI.NotFoundError);
});

test('413 for a body over --max-body (both SDKs)', async () => {
  const huge = [{ role: 'user', content: 'x'.repeat(100000) }];
  await assert.rejects(oai().chat.completions.create({ model: 'm', messages: huge }),
    (e) => e instanceof OpenAI.APIError && e.status === 413);
  await assert.rejects(ant().messages.create({ model: 'm', messages: huge, max_tokens: 2 }),
    (e) => e instanceof Anthropic.ContentTooLargeError && e.error.error.type === 'request_too_large');
});

test('raw HTTP: bad JSON, wrong content type, deep nesting, bad UTF-8, wrong method', async () => {
  const auth = { Authorization: `Bearer ${KEY}` };
  let r = await postRaw(srv.port, '/v1/chat/completions', '{"messages": [', auth);
  assert.equal(r.status, 400);
  assert.match(JSON.parse(r.body).error.message, /invalid JSON/);
  r = await postRaw(srv.port, '/v1/chat/completions', JSON.stringify({ messages: USER }), { ...auth, 'Content-Type': 'text/plain' });
  assert.equal(r.status, 415);
  assert.equal(JSON.parse(r.body).error.param, 'Content-Type');
  r = await postRaw(srv.port, '/v1/messages', '['.repeat(5000) + ']'.repeat(5000), auth);
  assert.equal(r.status, 400);
  assert.equal(JSON.parse(r.body).type, 'error');
  r = await postRaw(srv.port, '/v1/chat/completions', Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}]}')]), auth);
  assert.equal(r.status, 400);
  r = await rawRequest(srv.port, `GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`);
  assert.equal(r.status, 405);
  // the server still serves
  assert.equal((await oai().chat.completions.create({ model: 'm', messages: USER, max_tokens: 1 })).object, 'chat.completion');
});

test('a client that never finishes its headers is dropped; others are served meanwhile', async () => {
  const sock = net.connect(srv.port, '127.0.0.1');
  const closed = new Promise((resolve) => { sock.on('close', resolve); sock.on('error', () => {}); });
  sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: appl');
  const r = await oai().chat.completions.create({ model: 'm', messages: USER, max_tokens: 3 });
  assert.equal(r.choices[0].finish_reason, 'length');
  await closed; // --timeout 2: the server hangs up on the idle, half-sent request
  assert.ok(sock.destroyed || sock.readableEnded);
});

test('an idle keep-alive connection is closed after a completed generation (--timeout)', { timeout: 20000 }, async () => {
  const sock = net.connect(srv.port, '127.0.0.1');
  let data = '';
  sock.on('data', (d) => { data += d; });
  const closed = new Promise((resolve) => { sock.on('close', resolve); sock.on('error', () => {}); });
  const body = JSON.stringify({ messages: USER, max_tokens: 1 });
  sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  await closed; // the reply arrives, then the idle connection is dropped instead of held forever
  assert.match(data, /^HTTP\/1\.1 200/);
  assert.match(data, /"finish_reason":"length"/);
});

test('--conns bounds concurrent connections: beyond it a prompt dialect-shaped 503, /health still answers; a freed slot serves again', { timeout: 60000 }, async (t) => {
  const s = await startServer(['--conns', '2', '--timeout', '30']);
  t.after(() => s.stop('SIGKILL'));
  const hold = [];
  for (let i = 0; i < 2; i++) {
    const c = net.connect(s.port, '127.0.0.1');
    c.on('error', () => {});
    await new Promise((r) => c.on('connect', r));
    c.write('GET /health HTTP/1.1\r\nHost: x\r\n'); // headers never finished: holds a slot
    hold.push(c);
  }
  await new Promise((r) => setTimeout(r, 200));
  // fresh sockets (fetch would reuse the harness's pooled keep-alive connection)
  const raw = (text) => rawRequest(s.port, text, { timeoutMs: 5000 }).catch(() => ({ status: 0 }));
  const health = () => raw('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  const h = await health();
  assert.equal(h.status, 200, 'the guard answers /health without a slot');
  assert.equal(JSON.parse(h.body).status, 'ok');
  const body = JSON.stringify({ model: 'm', messages: USER, max_tokens: 2 });
  const post = (path) => raw(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  const m = await post('/v1/messages');
  assert.equal(m.status, 503);
  assert.match(m.head, /retry-after: 1/i);
  assert.equal(JSON.parse(m.body).error.type, 'overloaded_error');
  assert.match(JSON.parse(m.body).error.message, /connection limit \(2, --conns\)/);
  const c = await post('/v1/chat/completions');
  assert.equal(c.status, 503);
  assert.equal(JSON.parse(c.body).error.type, 'server_error');
  hold[0].destroy();
  let ok = false;
  for (let i = 0; i < 100 && !ok; i++) {
    const r = await post('/v1/chat/completions');
    ok = r.status === 200;
    if (!ok) await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(ok, 'served again once a slot is free');
  hold[1].destroy();
  assert.equal((await s.stop()).code, 0);
});

// Regression (an "APIConnectionError: Connection error" flake under ASan): with --timeout 2 the
// SDK's pooled connection was reused just as the server closed it. Every reply now says how long
// an idle connection lives, so clients retire it first.
test('every reply carries Keep-Alive: timeout=<--timeout> (JSON, stream, error, preflight)', async () => {
  const h = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };
  const body = JSON.stringify({ messages: USER, max_tokens: 1 });
  const rs = [
    await fetch(`${srv.url}/health`),
    await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: h, body }),
    await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: h, body: JSON.stringify({ messages: USER, max_tokens: 1, stream: true }) }),
    await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: h, body: '{' }),
    await fetch(`${srv.url}/v1/models`, { headers: { authorization: 'Bearer wrong' } }),
    await fetch(`${srv.url}/v1/chat/completions`, { method: 'OPTIONS' }),
  ];
  for (const r of rs) {
    await r.arrayBuffer();
    assert.equal(r.headers.get('keep-alive'), 'timeout=2', `${r.url} ${r.status}`);
  }
  // and the SDK, told so, reuses a connection idle for 1.5 s without a reset
  const c = oai();
  await c.models.list();
  await new Promise((r) => setTimeout(r, 1500));
  const m = await c.models.list();
  assert.ok(m.data.length >= 1);
});
