// Legacy text completions (issue 17 item 5) through the OpenAI SDK's completions.create: a raw
// prompt (no template), stream with [DONE], logprobs as an integer, echo, stop, seed, n.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { parseSSE, USER } from './harness.mjs';
import { serverForFile } from './fixture.mjs';

const h = serverForFile();
const GREEDY = { temperature: 0 };

test('completions: the raw prompt is the model input (the chat template prompt gives the chat reply)', async () => {
  const { prompt } = (await h.post('/apply-template?dialect=chat', { messages: USER })).json;
  const chat = await h.oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, ...GREEDY });
  const c = await h.oai.completions.create({ model: 'm', prompt, max_tokens: 8, ...GREEDY });
  assert.equal(c.object, 'text_completion');
  assert.match(c.id, /^cmpl-/);
  assert.equal(c.choices[0].text, chat.choices[0].message.content);
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.prompt_tokens, chat.usage.prompt_tokens);
  assert.equal(c.usage.completion_tokens, 8);
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + 8);
  // the same prompt as token ids, and as an array of one string
  const ids = (await h.post('/tokenize', { content: prompt })).json.tokens;
  const byIds = await h.oai.completions.create({ model: 'm', prompt: ids, max_tokens: 8, ...GREEDY });
  assert.equal(byIds.choices[0].text, c.choices[0].text);
  const byArr = await h.oai.completions.create({ model: 'm', prompt: [prompt], max_tokens: 8, ...GREEDY });
  assert.equal(byArr.choices[0].text, c.choices[0].text);
  const byIdArr = await h.oai.completions.create({ model: 'm', prompt: [ids], max_tokens: 8, ...GREEDY });
  assert.equal(byIdArr.choices[0].text, c.choices[0].text);
});

test('completions stream: chunks concatenate to the non-stream text, then [DONE] (raw and SDK)', async () => {
  const body = { model: 'm', prompt: 'Once upon a time', max_tokens: 10, ...GREEDY };
  const ref = await h.oai.completions.create(body);
  const s = await h.oai.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null, finish = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, ref.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, ref.usage);
  const raw = await h.post('/v1/completions', { ...body, stream: true });
  const ev = parseSSE(raw.text);
  assert.equal(ev.at(-1).data, '[DONE]');
  assert.ok(ev.slice(0, -1).every((e) => e.data.object === 'text_completion'));
});

test('completions: integer logprobs in the legacy shape, echo, stop, seed, n', async () => {
  const prompt = 'Once upon a time';
  const r = await h.oai.completions.create({ model: 'm', prompt, max_tokens: 5, logprobs: 3, ...GREEDY });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  assert.equal(lp.token_logprobs.length, 5);
  assert.ok(lp.token_logprobs.every((x) => typeof x === 'number' && x <= 0));
  assert.equal(lp.top_logprobs.length, 5);
  for (let i = 0; i < 5; i++) {
    const alts = Object.entries(lp.top_logprobs[i]);
    assert.ok(alts.length >= 1 && alts.length <= 3);
    const best = Math.max(...alts.map(([, v]) => v));
    assert.ok(Math.abs(best - lp.token_logprobs[i]) < 1e-6, 'greedy: the chosen token is the top one');
  }
  let off = 0;
  lp.tokens.forEach((t, i) => { assert.equal(lp.text_offset[i], off); off += Buffer.byteLength(t); });
  // echo: the prompt, then the same continuation
  const e = await h.oai.completions.create({ model: 'm', prompt, max_tokens: 5, echo: true, ...GREEDY });
  assert.equal(e.choices[0].text, prompt + r.choices[0].text);
  const es = await h.oai.completions.create({ model: 'm', prompt, max_tokens: 5, echo: true, stream: true, ...GREEDY });
  let et = '';
  for await (const ch of es) et += ch.choices[0]?.text ?? '';
  assert.equal(et, prompt + r.choices[0].text);
  // stop: a piece of the greedy reply cuts it there
  const long = await h.oai.completions.create({ model: 'm', prompt, max_tokens: 12, ...GREEDY });
  const cut = long.choices[0].text.slice(4, 7);
  const st = await h.oai.completions.create({ model: 'm', prompt, max_tokens: 12, stop: [cut], ...GREEDY });
  assert.equal(st.choices[0].text, long.choices[0].text.slice(0, long.choices[0].text.indexOf(cut)));
  assert.equal(st.choices[0].finish_reason, 'stop');
  // seed: the same sampled text twice; n: indexed choices
  const a = await h.oai.completions.create({ model: 'm', prompt, max_tokens: 6, temperature: 1, seed: 7, n: 2 });
  const b = await h.oai.completions.create({ model: 'm', prompt, max_tokens: 6, temperature: 1, seed: 7, n: 2 });
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
});

test('completions: what is not supported is a 400 naming the param', async () => {
  for (const [extra, param] of [[{ prompt: Array(33).fill('a'), n: 2 }, 'prompt'], [{ prompt: ['a', 5] }, 'prompt'],
    [{ prompt: ['a', []] }, 'prompt'], [{ prompt: ['a', [99999999]] }, 'prompt'], [{ prompt: 'a', suffix: 'z' }, 'suffix'],
    [{ prompt: 'a', echo: true, logprobs: 1 }, 'echo'], [{ prompt: 'a', best_of: 3 }, 'best_of'], [{}, 'prompt'],
    [{ prompt: [1, 'x'] }, 'prompt'], [{ prompt: [99999999] }, 'prompt'], [{ prompt: 'a', logprobs: 21 }, 'logprobs']]) {
    const r = await h.post('/v1/completions', { model: 'm', max_tokens: 2, ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
    assert.equal(r.json.error.param, param, JSON.stringify(extra));
  }
  await assert.rejects(h.oai.completions.create({ model: 'm', prompt: 'a', suffix: 'b' }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'suffix');
});

test('completions: logit_bias forces a token', async () => {
  const [hello] = (await h.post('/tokenize', { content: 'Hello', parse_special: false })).json.tokens;
  const r = await h.oai.completions.create({ model: 'm', prompt: 'Once', max_tokens: 3, logit_bias: { [hello]: 100 }, ...GREEDY });
  assert.equal(r.choices[0].text, 'HelloHelloHello');
});

// Several prompts in one request, as OpenAI answers them: one completion per prompt, choice index
// = prompt_index * n + i, usage summed; each choice is exactly what that prompt alone gives.
test('completions: an array of prompts gives one choice per prompt and n, usage summed', async () => {
  const prompts = ['Once upon a time', 'The cat', 'Hello there, friend'];
  const ids = (await h.post('/tokenize', { content: 'The dog' })).json.tokens;
  const alone = [];
  for (const p of [...prompts, ids]) alone.push(await h.oai.completions.create({ model: 'm', prompt: p, max_tokens: 5, ...GREEDY }));
  const r = await h.oai.completions.create({ model: 'm', prompt: [...prompts, ids], max_tokens: 5, ...GREEDY });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.deepEqual(r.choices.map((c) => c.text), alone.map((a) => a.choices[0].text));
  assert.deepEqual(r.choices.map((c) => c.finish_reason), alone.map((a) => a.choices[0].finish_reason));
  const sum = (k) => alone.reduce((s, a) => s + a.usage[k], 0);
  assert.equal(r.usage.prompt_tokens, sum('prompt_tokens'));
  assert.equal(r.usage.completion_tokens, sum('completion_tokens'));
  assert.equal(r.usage.total_tokens, sum('total_tokens'));
  // n = 2 per prompt with a seed: index p * 2 + i, each pair what that prompt gives with n = 2
  const two = prompts.slice(0, 2);
  const pairs = [];
  for (const p of two) pairs.push(await h.oai.completions.create({ model: 'm', prompt: p, max_tokens: 4, temperature: 1, seed: 3, n: 2 }));
  const rn = await h.oai.completions.create({ model: 'm', prompt: two, max_tokens: 4, temperature: 1, seed: 3, n: 2 });
  assert.deepEqual(rn.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.deepEqual(rn.choices.map((c) => c.text), pairs.flatMap((a) => a.choices.map((c) => c.text)));
  // echo: each choice starts with its own prompt
  const re = await h.oai.completions.create({ model: 'm', prompt: two, max_tokens: 2, echo: true, ...GREEDY });
  re.choices.forEach((c, i) => assert.ok(c.text.startsWith(two[i]), c.text));
  // streamed: every choice index appears, each choice's text joins to the non-streamed one, one
  // finish per choice, the summed usage in the usage chunk, then [DONE]
  const st = await h.oai.completions.create({ model: 'm', prompt: [...prompts, ids], max_tokens: 5, stream: true,
    stream_options: { include_usage: true }, ...GREEDY });
  const text = ['', '', '', ''];
  const fin = [0, 0, 0, 0];
  let usage;
  for await (const ch of st) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      text[c.index] += c.text;
      if (c.finish_reason) fin[c.index]++;
    }
  }
  assert.deepEqual(text, r.choices.map((c) => c.text));
  assert.deepEqual(fin, [1, 1, 1, 1]);
  assert.equal(usage.total_tokens, r.usage.total_tokens);
  // a prompt past the context is named by its index
  const long = await h.post('/v1/completions', { model: 'm', prompt: ['a', 'word '.repeat(100000)], max_tokens: 2 });
  assert.equal(long.status, 400, long.text);
  assert.equal(long.json.error.param, 'prompt');
  assert.match(long.json.error.message, /prompt 1/);
});
