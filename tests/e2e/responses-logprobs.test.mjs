// Responses logprobs through the openai SDK: include: ['message.output_text.logprobs'] switches
// them on, top_logprobs (0..20) sets the alternatives per token; output_text parts carry
// {token, logprob, bytes, top_logprobs}, text delta events the records of their tokens, and
// response.output_text.done the full list (ResponseTextDeltaEvent / ResponseTextDoneEvent).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, USER } from './harness.mjs';

let srv, oai;
const INCLUDE = ['message.output_text.logprobs'];
const BASE = { model: 'm', input: USER, max_output_tokens: 12, temperature: 0 };

before(async () => {
  srv = await startServer();
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
});
after(async () => assert.equal((await srv.stop()).code, 0, srv.log()));

const textPart = (r) => r.output.find((o) => o.type === 'message').content.find((c) => c.type === 'output_text');
// the fields the delta/done event types define (their entries carry no bytes)
const eventShape = (e) => ({ token: e.token, logprob: e.logprob, top_logprobs: e.top_logprobs.map((t) => ({ token: t.token, logprob: t.logprob })) });

test('non-stream: one entry per output token, top_logprobs as asked, greedy picks the top-1', async () => {
  const r = await oai.responses.create({ ...BASE, include: INCLUDE, top_logprobs: 4 });
  assert.equal(r.top_logprobs, 4);
  const lp = textPart(r).logprobs;
  assert.equal(lp.length, r.usage.output_tokens, 'every output token has its entry (reasoning off)');
  assert.ok(lp.length > 0);
  for (const e of lp) {
    assert.deepEqual(Object.keys(e).sort(), ['bytes', 'logprob', 'token', 'top_logprobs']);
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0, `logprob ${e.logprob} > 0`);
    assert.equal(e.top_logprobs.length, 4);
    for (let i = 1; i < e.top_logprobs.length; i++)
      assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob, 'top list sorted descending');
    for (const t of e.top_logprobs) {
      assert.ok(t.logprob <= 0);
      assert.deepEqual(Object.keys(t).sort(), ['bytes', 'logprob', 'token']);
    }
    // temperature 0: the chosen token is the most likely one
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5, `${e.logprob} vs ${e.top_logprobs[0].logprob}`);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.deepEqual(e.top_logprobs[0].bytes, e.bytes);
  }
  // the tokens' bytes spell the reply text
  assert.equal(Buffer.from(lp.flatMap((e) => e.bytes)).toString('utf8'), r.output_text);
  // without logprobs asked, the same reply (the sampler's choice does not depend on them)
  const plain = await oai.responses.create(BASE);
  assert.equal(plain.output_text, r.output_text);
  assert.deepEqual(textPart(plain).logprobs, []);
});

test('include alone: logprobs with empty top_logprobs; top_logprobs alone: none (as OpenAI)', async () => {
  const inc = await oai.responses.create({ ...BASE, include: INCLUDE });
  const lp = textPart(inc).logprobs;
  assert.equal(lp.length, inc.usage.output_tokens);
  for (const e of lp) assert.deepEqual(e.top_logprobs, []);
  const top = await oai.responses.create({ ...BASE, top_logprobs: 5 });
  assert.equal(top.top_logprobs, 5, 'echoed');
  assert.deepEqual(textPart(top).logprobs, []);
  // top_logprobs 0 with include is the same as include alone
  const zero = await oai.responses.create({ ...BASE, include: INCLUDE, top_logprobs: 0 });
  assert.deepEqual(textPart(zero).logprobs, lp);
});

test('stream: deltas carry their tokens\' logprobs; concatenated they equal the non-stream list', async () => {
  const params = { ...BASE, max_output_tokens: 16, include: INCLUDE, top_logprobs: 3 };
  const ref = textPart(await oai.responses.create(params)).logprobs;
  const stream = await oai.responses.create({ ...params, stream: true });
  const fromDeltas = [];
  let done = null, final = null, text = '', nDeltas = 0;
  for await (const ev of stream) {
    if (ev.type === 'response.output_text.delta') {
      nDeltas++;
      text += ev.delta;
      assert.ok(Array.isArray(ev.logprobs));
      for (const e of ev.logprobs) assert.deepEqual(Object.keys(e).sort(), ['logprob', 'token', 'top_logprobs']);
      fromDeltas.push(...ev.logprobs);
    } else if (ev.type === 'response.output_text.done') {
      done = ev;
    } else if (ev.type === 'response.completed' || ev.type === 'response.incomplete') {
      final = ev.response;
    }
  }
  assert.ok(nDeltas > 1);
  assert.equal(fromDeltas.length, ref.length);
  assert.deepEqual(fromDeltas, ref.map(eventShape));
  assert.equal(done.text, text);
  assert.deepEqual(done.logprobs, ref.map(eventShape));
  assert.deepEqual(textPart(final).logprobs, ref, 'the final response carries the full entries');
});

test('responses.stream() helper completes and its final response carries the logprobs', async () => {
  // a reply that completes (the helper takes its final response from response.completed; on
  // response.incomplete it keeps its own snapshot, which never accumulates logprobs)
  const params = { ...BASE, max_output_tokens: 40, regex: 'The answer is (yes|no)\\.', include: INCLUDE, top_logprobs: 2 };
  const ref = await oai.responses.create(params);
  assert.equal(ref.status, 'completed');
  assert.ok(textPart(ref).logprobs.length > 1);
  const s = oai.responses.stream(params);
  let n = 0;
  s.on('response.output_text.delta', (e) => (n += e.logprobs.length));
  const fin = await s.finalResponse();
  assert.equal(textPart(fin).text, ref.output_text);
  assert.deepEqual(textPart(fin).logprobs, textPart(ref).logprobs);
  assert.equal(n, textPart(ref).logprobs.length);
});

test('reasoning tokens get no output_text logprobs (a constraint-forced <think> head)', async () => {
  const THINK = '<think>\nLet me see\\.\n</think>\n\nThe answer is (yes|no)\\.';
  const params = { model: 'm', input: USER, max_output_tokens: 60, regex: THINK, temperature: 0, include: INCLUDE, top_logprobs: 1 };
  const r = await oai.responses.create(params);
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  const lp = textPart(r).logprobs;
  const spelled = Buffer.from(lp.flatMap((e) => e.bytes)).toString('utf8');
  // only the reply's tokens (and the blank line after </think>, which the reply drops)
  assert.equal(spelled.trimStart(), r.output_text);
  assert.ok(!/think|Let|see/.test(spelled), JSON.stringify(spelled));
  const s = oai.responses.stream(params);
  const streamed = [];
  s.on('response.output_text.delta', (e) => streamed.push(...e.logprobs));
  const fin = await s.finalResponse();
  assert.deepEqual(streamed, lp.map(eventShape));
  assert.deepEqual(textPart(fin).logprobs, lp);
});

test('bad top_logprobs / include values are a 400 naming the param', async () => {
  const cases = [
    [{ top_logprobs: 21 }, 'top_logprobs'],
    [{ top_logprobs: -1 }, 'top_logprobs'],
    [{ top_logprobs: 1.5 }, 'top_logprobs'],
    [{ top_logprobs: 'three' }, 'top_logprobs'],
    [{ include: 'message.output_text.logprobs' }, 'include'],
    [{ include: ['message.output_text.logprobs', 'message.output_text.bogus'] }, 'include[1]'],
    [{ include: [null] }, 'include[0]'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(oai.responses.create({ ...BASE, include: INCLUDE, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === param &&
        e.error.type === 'invalid_request_error' && e.message.includes(param),
      JSON.stringify(extra));
    await assert.rejects(oai.responses.create({ ...BASE, include: INCLUDE, stream: true, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === param, `stream ${JSON.stringify(extra)}`);
  }
});
