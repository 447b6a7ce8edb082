// Continuous batching (--batch N, docs/batching.md, issue 12 items 1-2): greedy replies are
// byte-identical batched and solo in every dialect; a stream dropped mid-batch leaves its siblings
// intact; a request arriving mid-batch joins and completes while an older stream still runs;
// n = 3 runs as three streams of one prefill, identical to the one-at-a-time server's choices.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, rawStream } from './harness.mjs';

let srv, solo;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  srv = await startServer(['--batch', '4', '--log-level', 'debug', '--max-tokens', '40000']);
  solo = await startServer(['--batch', '1', '--max-tokens', '40000']);
});
after(async () => {
  for (const s of [srv, solo]) {
    const r = await s.stop();
    assert.equal(r.code, 0, s.log());
  }
});

async function post(s, path, body) {
  const r = await fetch(`${s.url}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
  });
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  return j;
}

// What must not change between a batched and a solo run: the reply, its finish and token counts
// (ids and timestamps differ by design).
function strip(v) {
  if (Array.isArray(v)) return v.map(strip);
  if (v && typeof v === 'object') {
    const o = {};
    for (const k of Object.keys(v).sort())
      if (!['id', 'created', 'created_at', 'completed_at', 'system_fingerprint', 'cached_tokens',
            'prompt_tokens_details', 'input_tokens_details', 'cache_read_input_tokens', 'call_id'].includes(k))
        o[k] = strip(v[k]);
    return o;
  }
  return v;
}
const REPLY = {
  '/v1/chat/completions': (j) => strip({ c: j.choices, u: j.usage?.completion_tokens }),
  '/v1/responses': (j) => strip({ o: j.output, s: j.status, u: j.usage?.output_tokens }),
  '/v1/messages': (j) => strip({ c: j.content, s: j.stop_reason, u: j.usage?.output_tokens }),
  '/v1/completions': (j) => strip({ c: j.choices, u: j.usage?.completion_tokens }),
};

function reqs(tag) {
  const say = (w) => `Please write about ${w} (${tag}).`;
  return [
    ['/v1/chat/completions', { messages: [{ role: 'user', content: say('cats') }], max_tokens: 24, temperature: 0 }],
    ['/v1/responses', { input: say('rivers'), max_output_tokens: 24, temperature: 0 }],
    ['/v1/messages', { model: 'm', messages: [{ role: 'user', content: say('clocks') }], max_tokens: 24, temperature: 0 }],
    ['/v1/completions', { prompt: say('stones'), max_tokens: 24, temperature: 0 }],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: say('maps') }], max_tokens: 20, temperature: 0,
      response_format: { type: 'json_object' } }],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: say('ink') }], max_tokens: 16, temperature: 0, stop: ['e'] }],
  ];
}

function widths(s) {
  return [...s.log().matchAll(/batch: (\d+) streams in a step/g)].map((m) => Number(m[1]));
}

test('greedy replies are byte-identical batched and solo, every dialect (with constraints and stop strings)', async () => {
  for (const round of ['a', 'b']) { // b: the same prompts again, now partly from reused KV slots
    const rs = [...reqs('one'), ...reqs('two')];
    const ref = [];
    for (const [p, b] of rs) ref.push(REPLY[p](await post(solo, p, b)));
    // all at once: 4 run, the rest wait in the queue and join as streams end
    const got = await Promise.all(rs.map(([p, b]) => post(srv, p, b).then(REPLY[p])));
    for (let i = 0; i < rs.length; i++)
      assert.deepEqual(got[i], ref[i], `round ${round}, request ${i} (${rs[i][0]}) differs batched`);
  }
  assert.ok(Math.max(...widths(srv)) >= 3, `streams shared steps: widths ${widths(srv)}`);
});

async function until(pred, what) {
  for (let i = 0; i < 3000; i++) { if (await pred()) return; await sleep(10); }
  assert.fail(`timed out waiting for ${what}`);
}
const LONG = { messages: [{ role: 'user', content: 'Tell me a story about a cat.' }], max_tokens: 4000, stream: true, temperature: 0 };

test('a stream dropped mid-batch does not disturb its siblings', async () => {
  const sib = reqs('sib').slice(0, 3);
  const ref = [];
  for (const [p, b] of sib) ref.push(REPLY[p](await post(solo, p, b)));
  const before = widths(srv).length;
  const doomed = rawStream(srv.port, LONG);
  await until(async () => doomed.data.length > 0, 'the doomed stream to start');
  const got = sib.map(([p, b]) => post(srv, p, b).then(REPLY[p]));
  await until(async () => widths(srv).slice(before).some((w) => w >= 3), 'the siblings to join the batch');
  doomed.sock.destroy();
  const res = await Promise.all(got);
  for (let i = 0; i < sib.length; i++) assert.deepEqual(res[i], ref[i], `sibling ${i} changed`);
  await until(async () => /POST \/v1\/chat\/completions 499/.test(srv.log()), 'the dropped request\'s log line');
});

test('a request arriving mid-batch joins at the next step and completes', async () => {
  const [p, b] = reqs('join')[0];
  const ref = REPLY[p](await post(solo, p, b));
  const long = rawStream(srv.port, LONG);
  await until(async () => long.data.length > 0, 'the long stream to start');
  const got = REPLY[p](await post(srv, p, b));
  // one stream at a time, it would have waited for the 4000-token stream to end
  assert.equal(long.ended, false, 'the joiner finished while the older stream still ran');
  assert.deepEqual(got, ref);
  long.sock.destroy();
});

test('n = 3 runs as three streams of one prefill: the same choices as one at a time', async () => {
  const body = { messages: [{ role: 'user', content: 'Three ways to say hello.' }], max_tokens: 20, n: 3,
    temperature: 1, seed: 7 };
  const a = await post(solo, '/v1/chat/completions', body);
  const marks = (srv.log().match(/shares the prefill of choice 0/g) ?? []).length;
  const c = await post(srv, '/v1/chat/completions', body);
  assert.equal(c.choices.length, 3);
  assert.deepEqual(strip(c.choices), strip(a.choices));
  assert.equal(c.usage.prompt_tokens, a.usage.prompt_tokens);
  assert.equal(c.usage.completion_tokens, a.usage.completion_tokens);
  const shared = (srv.log().match(/shares the prefill of choice 0/g) ?? []).length - marks;
  assert.equal(shared, 2, 'choices 1 and 2 copied choice 0\'s prefill');
  // greedy: three identical choices, each equal to the n = 1 reply
  const g = await post(srv, '/v1/chat/completions', { ...body, temperature: 0 });
  const one = await post(solo, '/v1/chat/completions', { ...body, temperature: 0, n: 1 });
  for (const ch of g.choices) assert.deepEqual(strip(ch.message), strip(one.choices[0].message));
});
