// The three dialects through the official SDKs against the real server on a tiny generated model.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, USER } from './harness.mjs';

let srv, oai, ant, oaiBare;
const GREEDY = { temperature: 0 };

before(async () => {
  srv = await startServer();
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  oaiBare = new OpenAI({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 }); // unprefixed paths
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, srv.log());
});

test('models list reports one model whose id every response echoes', async () => {
  const list = await oai.models.list();
  assert.equal(list.data.length, 1);
  const id = list.data[0].id;
  const r = await oai.chat.completions.create({ model: 'anything', messages: USER, max_tokens: 2 });
  assert.equal(r.model, id);
  const am = await ant.models.list();
  assert.equal(am.data[0].id, id);
});

test('chat create: shape, usage, finish_reason length at max_tokens', async () => {
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 7, ...GREEDY });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 7);
  assert.ok(r.usage.prompt_tokens > 5);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 7);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat stream + the SDK helper assemble the same text as create (greedy)', async () => {
  const ref = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 24, ...GREEDY });
  const stream = await oai.chat.completions.create({
    model: 'm', messages: USER, max_tokens: 24, stream: true, stream_options: { include_usage: true }, ...GREEDY,
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(chunks > 3);
  assert.equal(text, ref.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 24);
  const helper = oai.chat.completions.stream({ model: 'm', messages: USER, max_tokens: 24, ...GREEDY });
  const final = await helper.finalChatCompletion();
  assert.equal(final.choices[0].message.content, ref.choices[0].message.content);
  assert.equal(final.choices[0].finish_reason, 'length');
});

// A stop string taken from the middle of the real greedy reply (ASCII letters, first occurrence),
// so a request can end with finish_reason "stop" on a random-weight model.
async function findStop(messages, extra = {}) {
  const full = (await oai.chat.completions.create({ model: 'm', messages, max_tokens: 40, ...GREEDY, ...extra })).choices[0].message.content;
  for (let i = Math.floor(full.length / 3); i < full.length - 3; i++) {
    const cand = full.slice(i, i + 3);
    if (/^[A-Za-z]{3}$/.test(cand) && full.indexOf(cand) === i) return { full, stop: cand, at: i };
  }
  assert.fail(`no usable stop string in ${JSON.stringify(full)}`);
}

test('chat runTools completes when the model answers without calling a tool', async () => {
  // The runner sends its own tool JSON (key order matters to the prompt): record what it sends,
  // find a stop string in the greedy reply to exactly that request, then run it to a clean stop.
  let sent = null;
  const spy = new OpenAI({
    baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0,
    fetch: async (url, init) => { sent = JSON.parse(init.body); return fetch(url, init); },
  });
  const tools = [{ type: 'function', function: { name: 'get_time', description: 'time', parameters: { type: 'object', properties: {} }, function: () => '12:00' } }];
  await assert.rejects(spy.chat.completions.runTools({ model: 'm', messages: USER, max_tokens: 40, tools, ...GREEDY }).finalContent(), /length/);
  const { stop, full, at } = await findStop(sent.messages, { tools: sent.tools });
  const content = await spy.chat.completions.runTools({ model: 'm', messages: USER, max_tokens: 40, stop, tools, ...GREEDY }).finalContent();
  assert.equal(content, full.slice(0, at));
});

test('responses create and responses.stream() final response match (greedy)', async () => {
  const params = { model: 'm', input: USER, max_output_tokens: 20, ...GREEDY };
  // ask for an end-of-text reply budget large enough to see completed OR incomplete consistently
  const r = await oai.responses.create(params);
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.ok(['completed', 'incomplete'].includes(r.status));
  const msg = r.output.find((o) => o.type === 'message');
  assert.ok(msg);
  assert.equal(r.output_text, msg.content[0].text);
  assert.equal(r.usage.output_tokens <= 20, true);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  const events = [];
  const s = oai.responses.stream(params);
  s.on('event', (e) => events.push(e.type));
  const fin = await s.finalResponse();
  assert.equal(fin.output.find((o) => o.type === 'message').content[0].text, r.output_text);
  assert.deepEqual(events.slice(0, 2), ['response.created', 'response.in_progress']);
  const seqOk = events.includes('response.output_text.done') && events.includes('response.output_item.done');
  assert.ok(seqOk, events.join(','));
  assert.equal(events.at(-1), r.status === 'completed' ? 'response.completed' : 'response.incomplete');
});

test('responses: max_output_tokens -> incomplete with reason', async () => {
  const r = await oai.responses.create({ model: 'm', input: 'Hello there', max_output_tokens: 3, ...GREEDY });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 3);
});

test('messages create and messages.stream().finalMessage() match (greedy), stop_reason max_tokens', async () => {
  const params = { model: 'm', messages: USER, max_tokens: 20, ...GREEDY };
  const m = await ant.messages.create(params);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 20);
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');
  const text = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const fin = await ant.messages.stream(params).finalMessage();
  assert.equal(fin.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), text);
  assert.equal(fin.stop_reason, 'max_tokens');
  assert.equal(fin.usage.output_tokens, 20);
});

test('greedy determinism: same text in all three dialects, streamed or not', async () => {
  const messages = [{ role: 'user', content: 'Name three colors.' }];
  const N = 16;
  const texts = {};
  texts.chat = (await oai.chat.completions.create({ model: 'm', messages, max_tokens: N, ...GREEDY })).choices[0].message.content;
  texts.chatStream = (await oai.chat.completions.stream({ model: 'm', messages, max_tokens: N, ...GREEDY }).finalChatCompletion()).choices[0].message.content;
  texts.responses = (await oai.responses.create({ model: 'm', input: messages, max_output_tokens: N, ...GREEDY })).output_text;
  const rs = await oai.responses.stream({ model: 'm', input: messages, max_output_tokens: N, ...GREEDY }).finalResponse();
  texts.responsesStream = rs.output.find((o) => o.type === 'message').content[0].text;
  const m = await ant.messages.create({ model: 'm', messages, max_tokens: N, ...GREEDY });
  texts.messages = m.content.map((b) => b.text ?? '').join('');
  const ms = await ant.messages.stream({ model: 'm', messages, max_tokens: N, ...GREEDY }).finalMessage();
  texts.messagesStream = ms.content.map((b) => b.text ?? '').join('');
  for (const [k, v] of Object.entries(texts)) assert.equal(v, texts.chat, `${k} differs`);
  assert.ok(texts.chat.length > 0);
});

test('stop sequences: found in a greedy reply, then the reply stops before them in every dialect', async () => {
  const messages = [{ role: 'user', content: 'Write a long sentence.' }];
  const { full, stop, at } = await findStop(messages);
  const expect = full.slice(0, at);
  const c = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 40, stop: [stop], ...GREEDY });
  assert.equal(c.choices[0].message.content, expect);
  assert.equal(c.choices[0].finish_reason, 'stop');
  // streamed: no prefix of the stop string leaks
  let streamed = '';
  for await (const ch of await oai.chat.completions.create({ model: 'm', messages, max_tokens: 40, stop: stop, stream: true, ...GREEDY }))
    streamed += ch.choices[0]?.delta?.content ?? '';
  assert.equal(streamed, expect);
  const r = await oai.responses.create({ model: 'm', input: messages, max_output_tokens: 40, stop: [stop], ...GREEDY });
  assert.equal(r.output_text, expect);
  const m = await ant.messages.create({ model: 'm', messages, max_tokens: 40, stop_sequences: [stop], ...GREEDY });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.equal(m.content.map((b) => b.text ?? '').join(''), expect);
  const ms = await ant.messages.stream({ model: 'm', messages, max_tokens: 40, stop_sequences: [stop], ...GREEDY }).finalMessage();
  assert.equal(ms.stop_reason, 'stop_sequence');
  assert.equal(ms.stop_sequence, stop);
  assert.equal(ms.content.map((b) => b.text ?? '').join(''), expect);
});

test('count_tokens equals the prompt tokens a create reports', async () => {
  const messages = [{ role: 'user', content: 'How many tokens is this?' }];
  const ct = await ant.messages.countTokens({ model: 'm', messages });
  const c = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 1 });
  assert.equal(ct.input_tokens, c.usage.prompt_tokens);
});

test('unprefixed paths serve the same API', async () => {
  const a = await oaiBare.chat.completions.create({ model: 'm', messages: USER, max_tokens: 5, ...GREEDY });
  const b = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 5, ...GREEDY });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const r = await oaiBare.responses.create({ model: 'm', input: 'hi', max_output_tokens: 2 });
  assert.equal(r.object, 'response');
  const m = await fetch(`${srv.url}/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: USER, max_tokens: 2 }) });
  assert.equal(m.status, 200);
  assert.equal((await m.json()).type, 'message');
  assert.equal((await fetch(`${srv.url}/models`)).status, 200);
});

test('n > 1 and logprobs / top_logprobs on chat completions', async () => {
  const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 6, n: 2, logprobs: true, top_logprobs: 3, ...GREEDY });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.equal(r.choices[0].message.content, r.choices[1].message.content, 'greedy choices agree');
  assert.equal(r.usage.completion_tokens, 12);
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 6);
  for (const e of lp) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.logprob <= 0);
    // greedy: the chosen token is the most likely one
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5);
    assert.deepEqual(e.top_logprobs[0].bytes, e.bytes);
  }
  const bytes = Buffer.from(lp.flatMap((e) => e.bytes));
  assert.equal(bytes.toString('utf8'), r.choices[0].message.content);
  // streamed, logprobs ride on the content chunks
  let n = 0;
  for await (const c of await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 6, logprobs: true, stream: true, ...GREEDY }))
    n += c.choices[0]?.logprobs?.content?.length ?? 0;
  assert.equal(n, 6);
});

test('reasoning on and off: accepted per dialect, prompt changes, content stays clean', async () => {
  const off = await (await fetch(`${srv.url}/apply-template?dialect=chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: USER }) })).json();
  const on = await (await fetch(`${srv.url}/apply-template?dialect=chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: USER, reasoning_effort: 'high' }) })).json();
  assert.ok(off.prompt.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n'), JSON.stringify(off.prompt));
  assert.ok(on.prompt.endsWith('<|im_start|>assistant\n'), JSON.stringify(on.prompt));
  const r1 = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, reasoning_effort: 'medium', ...GREEDY });
  assert.equal(typeof r1.choices[0].message.content, 'string');
  const r2 = await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 8, reasoning: { effort: 'low' }, ...GREEDY });
  assert.ok(r2.output.some((o) => o.type === 'message'));
  const r3 = await ant.messages.create({ model: 'm', messages: USER, max_tokens: 8, thinking: { type: 'enabled', budget_tokens: 1024 }, ...GREEDY });
  assert.ok(r3.content.some((b) => b.type === 'text'));
  const r4 = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, reasoning_effort: 'none', ...GREEDY });
  assert.equal(r4.choices[0].message.reasoning_content, undefined);
  for (const t of [r1.choices[0].message.content, r4.choices[0].message.content])
    assert.ok(!t.includes('</think>') && !t.startsWith('<think>'));
  const tmpl = await (await fetch(`${srv.url}/apply-template?dialect=messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: USER, thinking: { type: 'enabled', budget_tokens: 1024 } }) })).json();
  assert.equal(tmpl.prompt, on.prompt, 'the same conversation renders the same in both dialects');
});

test('responses echo instructions (only the instructions param) and metadata', async () => {
  const a = await oai.responses.create({ model: 'm', instructions: 'Be brief.', input: 'hi', max_output_tokens: 2, metadata: { k: 'v' } });
  assert.equal(a.instructions, 'Be brief.');
  assert.deepEqual(a.metadata, { k: 'v' });
  const b = await oai.responses.create({ model: 'm', input: [{ role: 'developer', content: 'sys' }, { role: 'user', content: 'hi' }], max_output_tokens: 2 });
  assert.equal(b.instructions, null);
  assert.equal(b.temperature, 0.7, 'the family default, echoed at float precision');
});

test('seed makes sampled (temperature > 0) replies reproducible', async () => {
  const p = { model: 'm', messages: USER, max_tokens: 12, temperature: 1.0, top_p: 1, seed: 1234 };
  const a = (await oai.chat.completions.create(p)).choices[0].message.content;
  const b = (await oai.chat.completions.create(p)).choices[0].message.content;
  assert.equal(a, b);
  const others = new Set();
  for (const seed of [1, 2, 3, 4]) others.add((await oai.chat.completions.create({ ...p, seed })).choices[0].message.content);
  assert.ok(others.size > 1, 'different seeds sample different replies');
});
