// Accept concurrently, generate sequentially: 429 beyond the queue, stalled readers, disconnects,
// SIGTERM during generation (R-CONC-1..6).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, USER, rawStream } from './harness.mjs';

let srv, oai;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  srv = await startServer(['--queue', '1', '--batch', '1', '--max-tokens', '40000']); // one stream at a time: queue counts
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, srv.log());
});

async function health(s = srv) { return (await fetch(`${s.url}/health`)).json(); }
async function until(pred, what) {
  for (let i = 0; i < 2000; i++) { if (await pred()) return; await sleep(10); }
  assert.fail(`timed out waiting for ${what}`);
}


// The request log line the server wrote for a finished request (status, completion tokens).
function logLines() {
  return srv.log().split('\n').filter((l) => /POST \/v1\/chat\/completions (\d+) prompt=/.test(l)).map((l) => ({
    status: Number(/completions (\d+)/.exec(l)[1]), completion: Number(/completion=(\d+)/.exec(l)[1]),
    prompt: Number(/prompt=(\d+)/.exec(l)[1]),
  }));
}

test('429 with Retry-After when the queue is full; RateLimitError in both SDKs', async () => {
  const long = rawStream(srv.port, { messages: USER, max_tokens: 2000, stream: true, temperature: 0 });
  await until(async () => long.data.length > 0, 'the long stream to start');
  const queued = oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 2 });
  await until(async () => (await health()).queued === 1, 'the second request to be queued');
  await assert.rejects(oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 2 }),
    (e) => e instanceof OpenAI.RateLimitError && e.headers.get('retry-after') === '1' && e.error.type === 'rate_limit_error');
  await assert.rejects(new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 }).messages.create({ model: 'm', messages: USER, max_tokens: 2 }),
    (e) => e instanceof Anthropic.RateLimitError && e.error.error.type === 'rate_limit_error');
  long.sock.destroy(); // frees the worker; the queued request then runs
  const r = await queued;
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('a client that disconnects mid-stream frees the worker (its generation is aborted)', async () => {
  // a prompt of its own length identifies this request's log line
  const messages = [{ role: 'user', content: 'Disconnect test. '.repeat(7) }];
  const ct = await (await fetch(`${srv.url}/v1/messages/count_tokens`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages }) })).json();
  const s = rawStream(srv.port, { messages, max_tokens: 3000, stream: true, temperature: 0 });
  await until(async () => s.data.toString().includes('data: {'), 'first chunk');
  s.sock.destroy();
  const mine = () => logLines().filter((l) => l.prompt === ct.input_tokens);
  await until(async () => mine().length > 0, 'the aborted request to be logged');
  const line = mine()[0];
  assert.equal(line.status, 499);
  assert.ok(line.completion < 3000, `generation ran on to ${line.completion} tokens`);
  await until(async () => !(await health()).busy, 'the worker to be idle');
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 2 });
  assert.equal(r.usage.completion_tokens, 2);
});

test('a queued request whose client goes away is removed without running', async () => {
  const long = rawStream(srv.port, { messages: USER, max_tokens: 2000, stream: true, temperature: 0 });
  await until(async () => long.data.length > 0, 'the long stream to start');
  const ac = new AbortController();
  const p = oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 5 }, { signal: ac.signal });
  await until(async () => (await health()).queued === 1, 'queued');
  ac.abort();
  await assert.rejects(p);
  await until(async () => (await health()).queued === 0, 'the queue to drop the job');
  assert.equal((await health()).busy, true, 'the long stream is still the one running');
  long.sock.destroy();
});

test('a client that reads nothing does not hold up a sibling; it later gets the whole stream', async () => {
  await until(async () => !(await health()).busy, 'idle worker');
  const N = 600;
  // top_logprobs 20 makes each frame ~3 KB: ~2 MB in all, far more than the socket buffers hold,
  // so most of the reply has to wait in the server-side pipe while nobody reads
  const stalled = rawStream(srv.port, { messages: USER, max_tokens: N, stream: true, temperature: 0, logprobs: true, top_logprobs: 20 });
  stalled.sock.pause(); // read nothing
  await until(async () => (await health()).busy, 'the stalled request to run');
  const sibling = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  assert.equal(sibling.usage.completion_tokens, 4);
  assert.equal(stalled.ended, false);
  stalled.sock.resume();
  await until(async () => stalled.ended, 'the stalled stream to end');
  const text = stalled.data.toString('utf8');
  assert.ok(stalled.data.length > 1_000_000, `only ${stalled.data.length} bytes`);
  assert.ok(text.includes('"finish_reason":"length"'));
  assert.ok(text.includes('data: [DONE]'));
  const ours = logLines().filter((l) => l.completion === N);
  assert.ok(ours.length >= 1 && ours.at(-1).status === 200);
});

test('SIGTERM during generation exits 0 and ends the stream', async () => {
  const s2 = await startServer(['--max-tokens', '40000']);
  const st = rawStream(s2.port, { messages: USER, max_tokens: 5000, stream: true, temperature: 0 });
  await until(async () => st.data.length > 0, 'stream start');
  const r = await s2.stop('SIGTERM');
  assert.equal(r.code, 0, s2.log());
  await until(async () => st.ended, 'the client connection to close');
  assert.match(s2.log(), /SIGTERM: shutting down/);
});

test('SIGTERM with a client that reads nothing still exits 0', { timeout: 60000 }, async () => {
  const s3 = await startServer(['--max-tokens', '40000']);
  const st = rawStream(s3.port, { messages: USER, max_tokens: 3000, stream: true, temperature: 0, logprobs: true, top_logprobs: 20 });
  st.sock.pause();
  await until(async () => (await health(s3)).busy, 'generation to run');
  const r = await s3.stop('SIGTERM');
  assert.equal(r.code, 0, s3.log());
  st.sock.destroy();
});
