// API conformance (issue 17): protocol details real clients read, through the official SDKs where
// they read the field, and the three dialects rendering one conversation to one prompt.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, parseSSE, USER } from './harness.mjs';

let srv, oai, ant;
const GREEDY = { temperature: 0 };

before(async () => {
  srv = await startServer([]);
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, srv.log());
});

const post = (path, body) =>
  fetch(`${srv.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function prompt(dialect, body) {
  const r = await post(`/apply-template?dialect=${dialect}`, body);
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  return j.prompt;
}

// Bug 1: message_start carries the real input side (the Anthropic SDK's snapshot at that event).
test('messages stream: message_start usage has the real input_tokens and cache_read_input_tokens', async () => {
  const params = { model: 'm', max_tokens: 3, messages: USER, ...GREEDY };
  const { input_tokens: counted } = await ant.messages.countTokens({ model: 'm', messages: USER });
  assert.ok(counted > 0);
  for (let round = 0; round < 2; round++) { // round 1 reuses the prompt's rows (KV reuse is always on)
    let atStart = null;
    const stream = ant.messages.stream(params);
    stream.on('streamEvent', (ev, snap) => {
      if (ev.type === 'message_start') atStart = { ...snap.usage };
    });
    const fin = await stream.finalMessage();
    assert.ok(atStart, 'no message_start');
    assert.equal(atStart.input_tokens + atStart.cache_read_input_tokens, counted);
    assert.equal(atStart.input_tokens, fin.usage.input_tokens);
    assert.equal(atStart.cache_read_input_tokens, fin.usage.cache_read_input_tokens);
    if (round === 1) assert.ok(atStart.cache_read_input_tokens > 0, JSON.stringify(atStart));
  }
});

// Bug 2 + item 3: the same conversation in three dialects gives one prompt, byte for byte.
const TOOL = { name: 'get_weather', description: 'Weather of a city', schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };
const CONVERSATIONS = {
  'system prompt': {
    chat: { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] },
    responses: { instructions: 'Be brief.', input: [{ role: 'user', content: 'Hi' }] },
    messages: { system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }] },
  },
  'tools, a call, its result, reasoning in the tool loop': {
    chat: {
      tools: [{ type: 'function', function: { name: TOOL.name, description: TOOL.description, parameters: TOOL.schema } }],
      messages: [
        { role: 'system', content: 'You help.' },
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: '', reasoning_content: 'I should call the tool.', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'sunny, 21C' },
      ],
    },
    responses: {
      tools: [{ type: 'function', name: TOOL.name, description: TOOL.description, parameters: TOOL.schema }],
      input: [
        { role: 'system', content: 'You help.' },
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'I should call the tool.' }] },
        { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city": "Paris"}' },
        { type: 'function_call_output', call_id: 'c1', output: 'sunny, 21C' },
      ],
    },
    messages: {
      system: 'You help.',
      tools: [{ name: TOOL.name, description: TOOL.description, input_schema: TOOL.schema }],
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'I should call the tool.', signature: 'x' }, { type: 'tool_use', id: 'c1', name: 'get_weather', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'c1', content: 'sunny, 21C' }] },
      ],
    },
  },
  'reasoning on earlier turns and on a final prefill': {
    chat: {
      messages: [
        { role: 'user', content: 'Think, then answer.' },
        { role: 'assistant', content: 'Forty-two.', reasoning_content: 'The answer is known.' },
        { role: 'user', content: 'Again?' },
        { role: 'assistant', content: 'Yes.', reasoning_content: 'Still known.' },
      ],
    },
    responses: {
      input: [
        { role: 'user', content: 'Think, then answer.' },
        { type: 'reasoning', summary: [{ type: 'summary_text', text: 'The answer is known.' }] },
        { role: 'assistant', content: [{ type: 'output_text', text: 'Forty-two.' }] },
        { role: 'user', content: 'Again?' },
        { type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: 'Still known.' }] },
        { role: 'assistant', content: 'Yes.' },
      ],
    },
    messages: {
      messages: [
        { role: 'user', content: 'Think, then answer.' },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'The answer is known.', signature: '' }, { type: 'text', text: 'Forty-two.' }] },
        { role: 'user', content: 'Again?' },
        { role: 'assistant', content: [{ type: 'redacted_thinking', data: 'opaque' }, { type: 'thinking', thinking: 'Still known.', signature: '' }, { type: 'text', text: 'Yes.' }] },
      ],
    },
  },
  'assistant prefill': {
    chat: { messages: [{ role: 'system', content: 'JSON only.' }, { role: 'user', content: 'Give me an object.' }, { role: 'assistant', content: '{"a":' }] },
    responses: { instructions: 'JSON only.', input: [{ role: 'user', content: 'Give me an object.' }, { role: 'assistant', content: '{"a":' }] },
    messages: { system: 'JSON only.', messages: [{ role: 'user', content: 'Give me an object.' }, { role: 'assistant', content: [{ type: 'text', text: '{"a":' }] }] },
  },
};

for (const [name, c] of Object.entries(CONVERSATIONS)) {
  test(`apply-template: chat, responses and messages render "${name}" identically`, async () => {
    const p = await prompt('chat', c.chat);
    assert.equal(await prompt('responses', c.responses), p, 'responses differs from chat');
    assert.equal(await prompt('messages', { max_tokens: 8, ...c.messages }), p, 'messages differs from chat');
    if (name.startsWith('tools')) assert.ok(p.includes('<think>\nI should call the tool.\n</think>\n\n<tool_call>'), p);
    if (name.startsWith('reasoning')) assert.ok(p.endsWith('<think>\nStill known.\n</think>\n\nYes.'), p);
  });
}

// Bug 3: an assistant prefill is continued, not closed.
test('prefill: the final assistant message stays open and the reply is only the continuation', async () => {
  const msgs = [{ role: 'user', content: 'Give me an object.' }, { role: 'assistant', content: 'The answer is' }];
  const p = await prompt('chat', { messages: msgs });
  assert.ok(p.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is'), JSON.stringify(p.slice(-80)));
  const pm = await prompt('messages', { max_tokens: 4, messages: msgs });
  assert.equal(pm, p);
  // The reply continues that prompt: chat and messages (same prompt, greedy) say the same thing,
  // and neither repeats the prefill.
  const a = await oai.chat.completions.create({ model: 'm', messages: msgs, max_tokens: 6, ...GREEDY });
  const b = await ant.messages.create({ model: 'm', messages: msgs, max_tokens: 6, ...GREEDY });
  assert.equal(b.content[0].text, a.choices[0].message.content);
  assert.ok(!a.choices[0].message.content.startsWith('The answer is'));
  // the prompt tokens are the rendered prompt's (no end-of-turn, no new header)
  const { input_tokens } = await ant.messages.countTokens({ model: 'm', messages: msgs });
  assert.equal(a.usage.prompt_tokens, input_tokens);
  assert.equal(b.usage.input_tokens + b.usage.cache_read_input_tokens, input_tokens);
});

// Bug 4: numbers echo as the client wrote them.
test('responses echoes temperature / top_p with the shortest round-trip digits', async () => {
  const r = await post('/v1/responses', { model: 'm', input: 'Hi', temperature: 0.7, top_p: 0.9, max_output_tokens: 2 });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  assert.match(text, /"temperature":0\.7,/);
  assert.match(text, /"top_p":0\.9,/);
  assert.doesNotMatch(text, /\d\.\d{12,}/); // no float noise anywhere (logprobs, sampling echo)
  const s = await oai.responses.create({ model: 'm', input: 'Hi', temperature: 0.3, max_output_tokens: 2 });
  assert.equal(s.temperature, 0.3);
});

test('logprob values print as short decimals (no 17-digit noise)', async () => {
  const r = await post('/v1/chat/completions', { model: 'm', messages: USER, max_tokens: 4, logprobs: true, top_logprobs: 3, ...GREEDY });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  const lps = [...text.matchAll(/"logprob":(-?[0-9.e-]+)/g)].map((m) => m[1]);
  assert.ok(lps.length >= 4);
  for (const s of lps) {
    assert.ok(s.replace(/^-|e.*$/g, '').replace('.', '').replace(/^0+/, '').length <= 9, s); // a float needs <= 9 digits
  }
});

// Bug 5: the first chat chunk carries the role and empty content; a stable system_fingerprint.
test('chat stream: first chunk is {"role":"assistant","content":""}; system_fingerprint is a stable build id', async () => {
  const r = await post('/v1/chat/completions', { model: 'm', messages: USER, max_tokens: 3, stream: true, n: 2 });
  const ev = parseSSE(await r.text()).filter((e) => e.data !== '[DONE]');
  assert.deepEqual(ev[0].data.choices[0].delta, { role: 'assistant', content: '' });
  for (const c of [0, 1]) {
    const mine = ev.filter((e) => e.data.choices[0]?.index === c);
    assert.deepEqual(mine[0].data.choices[0].delta, { role: 'assistant', content: '' });
    assert.ok(mine.slice(1).every((e) => !('role' in e.data.choices[0].delta)));
  }
  const fp = ev[0].data.system_fingerprint;
  assert.match(fp, /^fp_[0-9a-f]{12}$/);
  assert.ok(ev.every((e) => e.data.system_fingerprint === fp));
  const nonStream = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 2 });
  assert.equal(nonStream.system_fingerprint, fp);
  // the SDK's stream accumulator builds the message from these chunks
  const acc = await oai.chat.completions.stream({ model: 'm', messages: USER, max_tokens: 3, ...GREEDY }).finalChatCompletion();
  const ref = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 3, ...GREEDY });
  assert.equal(acc.choices[0].message.role, 'assistant');
  assert.equal(acc.choices[0].message.content, ref.choices[0].message.content);
});
