// Qwen3.5 (issue 15) end to end: the real server on a generated qwen35 model (Gated DeltaNet
// hybrid; the Qwen3.5 stand-in tokenizer — Qwen3's vocabulary with Qwen3.5's pre-tokenizer — and
// Qwen3.5's own chat template) answers in all three dialects, a JSON Schema constraint included;
// with reasoning on, the template primes `<think>\n` and the reply starts inside the reasoning
// section. Tool calls in the template's XML syntax (<tool_call>\n<function=NAME>\n<parameter=K>
// …) come back as each dialect's call objects, forced or written by a grammar, and round-trip
// into the prompt as the renderer writes them. A recurrent state cannot be cut to a prefix: a request reuses another's cache only from a state
// snapshot (taken at the 64-aligned ends of a prompt's messages), a follow-up then reports those
// rows as cached and its reply — text and logprobs — is identical to a cold server's; without a
// snapshot nothing is reused (docs/qwen35.md).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, BIN } from './harness.mjs';
import { forcedChat, forcedResponses, forcedMessages, CHAT_TOOLS, ANT_TOOLS, Q, WEATHER as CITY } from './forced-calls.mjs';

const TOOLDIR = BIN.replace(/\/[^/]*$/, '');

const MODEL = process.env.LMSERVE_MODEL_QWEN35 ?? 'build/models/qwen35_tiny-q8_0.gguf';
let srv, oai, ant;
const G = { temperature: 0 };
const WEATHER = {
  type: 'object', additionalProperties: false, required: ['city'],
  properties: { city: { type: 'string', maxLength: 12 } },
};

before(async () => {
  srv = await startServer(['--spec', '4'], { model: MODEL });
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, srv.log());
});

test('qwen35 loads: the hybrid geometry is logged, --spec is turned off for a recurrent state', async () => {
  const log = srv.log();
  assert.match(log, /qwen35, 4 layers \(1 full attention, 3 Gated DeltaNet\)/, log);
  assert.match(log, /--spec 4: off for qwen35/, log);
  const list = await oai.models.list();
  assert.equal(list.data.length, 1);
});

test('chat completions, responses and messages answer (create and stream)', async () => {
  const messages = [{ role: 'user', content: 'Tell me about the sea.' }];
  const c = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 12, ...G });
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 12);
  assert.ok(c.choices[0].message.content.length > 0);
  let text = '';
  for await (const ch of await oai.chat.completions.create({ model: 'm', messages, max_tokens: 12, stream: true, ...G }))
    for (const x of ch.choices) text += x.delta.content ?? '';
  assert.equal(text, c.choices[0].message.content);

  const r = await oai.responses.create({ model: 'm', input: 'Tell me about the sea.', max_output_tokens: 12, ...G });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.usage.output_tokens, 12);
  assert.ok(r.output_text.length > 0);

  const m = await ant.messages.create({ model: 'm', max_tokens: 12, messages, ...G });
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 12);
  const st = ant.messages.stream({ model: 'm', max_tokens: 12, messages, ...G });
  const fin = await st.finalMessage();
  assert.deepEqual(fin.content, m.content);
});

test('a JSON Schema constraint holds on the hybrid model', async () => {
  const j = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'A city as JSON.' }],
    max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'w', schema: WEATHER, strict: true } }, ...G });
  assert.equal(j.choices[0].finish_reason, 'stop', JSON.stringify(j.choices[0]));
  assert.ok(JSON.parse(j.choices[0].message.content).city.length <= 12);
  const r = await oai.responses.create({ model: 'm', input: 'A city as JSON.', max_output_tokens: 200,
    text: { format: { type: 'json_schema', name: 'w', schema: WEATHER, strict: true } }, ...G });
  assert.equal(r.status, 'completed', JSON.stringify(r.output));
  assert.ok(JSON.parse(r.output_text).city.length <= 12);
});

// ---- tool calls (the XML_PARAMS style: <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>…) ----

// text, then a call spelled as the template writes one (Python's str() of a boolean: False)
const TEXT_AND_CALL = 'start: "Let me check.\\n\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\nRome\\n</parameter>\\n' +
  '<parameter=metric>\\nFalse\\n</parameter>\\n</function>\\n</tool_call>"';

test('chat: a forced call (named and required) in the XML syntax comes back as tool_calls, create and stream', () =>
  forcedChat(oai, TEXT_AND_CALL));
test('responses: a forced call (required and named) is a function_call item, create and stream; text before a call is a message item first', () =>
  forcedResponses(oai, TEXT_AND_CALL));
test('messages: a forced call is a tool_use block, create and stream; text before a call stays in order', () =>
  forcedMessages(ant, TEXT_AND_CALL));

test('round trip: the call and its result come back into the prompt as the qwen35 renderer writes them (three dialects); the follow-up resumes from a snapshot', async () => {
  // the same declaration in each dialect (no `strict`: the template would print it, and only the
  // chat dialect carries it)
  const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather now.', parameters: CITY } }];
  const RTOOLS = [{ type: 'function', name: 'get_weather', description: 'Weather now.', parameters: CITY }];
  const c0 = await oai.chat.completions.create({ model: 'm', messages: Q, tools: CHAT_TOOLS.slice(0, 1), tool_choice: 'required', max_tokens: 200, ...G });
  const call = c0.choices[0].message.tool_calls[0];
  const a = JSON.parse(call.function.arguments);
  const openai = [...Q, { role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: 'get_weather', arguments: call.function.arguments } }] },
    { role: 'tool', tool_call_id: call.id, content: '21 C, sunny' }];
  const r = spawnSync(`${TOOLDIR}/lmserve-render`, ['--arch', 'qwen35'], {
    input: JSON.stringify({ messages: openai, tools: TOOLS, add_generation_prompt: true, enable_thinking: false }),
  });
  assert.equal(r.status, 0, r.stderr.toString());
  const want = r.stdout.toString('utf8');
  assert.ok(want.includes(`<tool_call>\n<function=get_weather>\n<parameter=city>\n${a.city}\n</parameter>\n` +
    `<parameter=metric>\n${a.metric ? 'True' : 'False'}\n</parameter>\n</function>\n</tool_call><|im_end|>\n` +
    '<|im_start|>user\n<tool_response>\n21 C, sunny\n</tool_response><|im_end|>\n'), want);
  const prompt = async (dialect, body) => {
    const res = await fetch(`${srv.url}/apply-template?dialect=${dialect}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()).prompt;
  };
  assert.equal(await prompt('chat', { messages: openai, tools: TOOLS }), want);
  assert.equal(await prompt('responses', { input: [{ role: 'user', content: 'Weather in Paris?' },
    { type: 'function_call', call_id: call.id, name: 'get_weather', arguments: call.function.arguments },
    { type: 'function_call_output', call_id: call.id, output: '21 C, sunny' }], tools: RTOOLS }), want);
  assert.equal(await prompt('messages', { max_tokens: 8, messages: [...Q,
    { role: 'assistant', content: [{ type: 'tool_use', id: call.id, name: 'get_weather', input: a }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: '21 C, sunny' }] }], tools: ANT_TOOLS }), want);
  // the follow-up answers; its prompt repeats the first request's messages (the tools block and
  // the question, 64-aligned): the snapshot taken there is reused
  const c = await oai.chat.completions.create({ model: 'm', messages: openai, tools: TOOLS, max_tokens: 4, ...G });
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.ok(c.usage.prompt_tokens_details.cached_tokens >= 128, JSON.stringify(c.usage));
});

test('reasoning on: the prompt ends with the primed <think>, the reply starts in the reasoning section (three dialects)', async () => {
  const messages = [{ role: 'user', content: 'Think about the sea.' }];
  const off = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 10, ...G });
  const on = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 10,
    chat_template_kwargs: { enable_thinking: true }, ...G });
  // "<think>\n" primed vs the closed "<think>\n\n</think>\n\n": two tokens fewer
  assert.equal(on.usage.prompt_tokens, off.usage.prompt_tokens - 2);
  const think = on.choices[0].message.reasoning_content ?? '';
  assert.ok(think.length > 0, JSON.stringify(on.choices[0].message));
  assert.ok(!think.includes('<think>'), think);
  assert.ok(off.choices[0].message.content.length > 0);
  assert.equal(off.choices[0].message.reasoning_content ?? '', '');
  let streamed = '', text = '';
  for await (const ch of await oai.chat.completions.create({ model: 'm', messages, max_tokens: 10, stream: true,
    reasoning_effort: 'high', ...G }))
    for (const x of ch.choices) { streamed += x.delta.reasoning_content ?? ''; text += x.delta.content ?? ''; }
  assert.equal(streamed, think);
  assert.equal(text, on.choices[0].message.content ?? '');

  const r = await oai.responses.create({ model: 'm', input: 'Think about the sea.', max_output_tokens: 10,
    reasoning: { effort: 'high' }, ...G });
  const ri = r.output.find((o) => o.type === 'reasoning');
  assert.ok(ri, JSON.stringify(r.output));
  assert.equal(ri.content.map((c) => c.text).join(''), think);

  const m = await ant.messages.create({ model: 'm', max_tokens: 10, messages,
    thinking: { type: 'enabled', budget_tokens: 1024 }, ...G });
  const tb = m.content.find((b) => b.type === 'thinking');
  assert.ok(tb, JSON.stringify(m.content));
  assert.equal(tb.thinking, think);
});

test('short prompts (no snapshot below 64 tokens): follow-ups report 0 cached tokens, replies do not depend on what ran before', async () => {
  const turn1 = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name a colour.' }];
  const a = await oai.chat.completions.create({ model: 'm', messages: turn1, max_tokens: 8, ...G });
  const turn2 = [...turn1, { role: 'assistant', content: a.choices[0].message.content },
    { role: 'user', content: 'And another one?' }];
  const b1 = await oai.chat.completions.create({ model: 'm', messages: turn2, max_tokens: 16, ...G });
  assert.equal(b1.usage.prompt_tokens_details.cached_tokens, 0);
  // something else in between, then the same follow-up: the same greedy reply, still cold
  await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Unrelated words here.' }], max_tokens: 20, ...G });
  const b2 = await oai.chat.completions.create({ model: 'm', messages: turn2, max_tokens: 16, ...G });
  assert.equal(b2.choices[0].message.content, b1.choices[0].message.content);
  assert.equal(b2.usage.prompt_tokens_details.cached_tokens, 0);
  const m = await ant.messages.create({ model: 'm', max_tokens: 4, system: 'You are terse.',
    messages: turn2.slice(1).map((x) => ({ role: x.role, content: x.content })), ...G });
  assert.equal(m.usage.cache_read_input_tokens ?? 0, 0);
});

test('a follow-up resumes from the state snapshot of the previous turn: cached rows, output identical to a cold server', async () => {
  const system = 'You are a careful assistant who answers in short sentences. '.repeat(14);
  const turn1 = [{ role: 'system', content: system }, { role: 'user', content: 'Name three rivers of Europe.' }];
  const a = await oai.chat.completions.create({ model: 'm', messages: turn1, max_tokens: 10, ...G });
  assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
  assert.ok(a.usage.prompt_tokens > 128, `prompt of ${a.usage.prompt_tokens} tokens`);
  const turn2 = [...turn1, { role: 'assistant', content: a.choices[0].message.content },
    { role: 'user', content: 'Which one is the longest?' }];
  const req = { model: 'm', messages: turn2, max_tokens: 16, logprobs: true, top_logprobs: 3, ...G };
  const warm = await oai.chat.completions.create(req);
  const cached = warm.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= 128 && cached % 64 === 0 && cached < a.usage.prompt_tokens, `cached ${cached}`);
  assert.match(srv.log(), /recurrent state: \d+ bytes per sequence/);
  const cold = await startServer([], { model: MODEL });
  try {
    const c = new OpenAI({ baseURL: `${cold.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const ref = await c.chat.completions.create(req);
    assert.equal(ref.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(warm.choices[0].message.content, ref.choices[0].message.content);
    assert.deepEqual(warm.choices[0].logprobs, ref.choices[0].logprobs); // the same bits
    // the Anthropic dialect reads the same pool: its follow-up reports the snapshot as cache reads
    const m = await ant.messages.create({ model: 'm', max_tokens: 4, system,
      messages: turn2.slice(1).map((x) => ({ role: x.role, content: x.content })), ...G });
    assert.ok(m.usage.cache_read_input_tokens >= 128, JSON.stringify(m.usage));
    // with reasoning on: the first turn's reasoning is dropped from the history (the template
    // keeps it only after the last user query), its messages are still the prefix: cached rows
    const think = { chat_template_kwargs: { enable_thinking: true } };
    const t1 = await oai.chat.completions.create({ model: 'm', messages: turn1, max_tokens: 6, ...think, ...G });
    assert.ok((t1.choices[0].message.reasoning_content ?? '').length > 0, JSON.stringify(t1.choices[0].message));
    const t2 = await oai.chat.completions.create({ model: 'm', max_tokens: 4, ...think, ...G,
      messages: [...turn1, { role: 'assistant', content: 'The Danube.', reasoning_content: t1.choices[0].message.reasoning_content },
        { role: 'user', content: 'And the shortest?' }] });
    assert.ok(t2.usage.prompt_tokens_details.cached_tokens >= 128, JSON.stringify(t2.usage));
  } finally {
    assert.equal((await cold.stop()).code, 0, cold.log());
  }
});
