// Gemma 4 (issue 14 step 2) end to end: the real server on a generated gemma4 model (mixed SWA /
// global layers, the stand-in Gemma tokenizer) answers in all three dialects, created and
// streamed; its prompts are the gemma4 renderer's (docs/families.md, "Gemma 4: text") with <bos>
// in front; a JSON Schema constraint holds; tool calls in Gemma 4's own syntax (forced with
// tool_choice, or spelled by a lark grammar) come back as each dialect's call objects, streamed
// and not, and a call with its result goes back into the prompt as the renderer writes it;
// <eos>, one of the descriptor's end-of-turn texts, ends a reply.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, BIN } from './harness.mjs';
import { forcedChat, forcedResponses, forcedMessages, CHAT_TOOLS, RSP_TOOLS, ANT_TOOLS, Q } from './forced-calls.mjs';

const MODEL = process.env.LMSERVE_MODEL_GEMMA4 ?? 'build/models/gemma4_tiny-q8_0.gguf';
const TOOLDIR = BIN.replace(/\/[^/]*$/, '');
let srv, oai, ant;
const G = { temperature: 0 };
const POINT = {
  type: 'object', additionalProperties: false, required: ['x', 'label'],
  properties: { x: { type: 'integer' }, label: { type: 'string', maxLength: 8 } },
};

// The prompt the gemma4 renderer makes of a conversation, tokenized with the model's vocabulary:
// the server's prompt is <bos> + these tokens.
function renderedTokens(messages, enableThinking) {
  const r = spawnSync(`${TOOLDIR}/lmserve-render`, ['--arch', 'gemma4'], {
    input: JSON.stringify({ messages, add_generation_prompt: true, enable_thinking: enableThinking }),
  });
  assert.equal(r.status, 0, r.stderr.toString());
  const t = spawnSync(`${TOOLDIR}/lmserve-tokenize`, [MODEL], { input: r.stdout });
  assert.equal(t.status, 0, t.stderr.toString());
  return t.stdout.toString().trim().split(',').length;
}

before(async () => {
  srv = await startServer([], { model: MODEL });
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, srv.log());
});

test('gemma4 loads with its family', async () => {
  assert.match(srv.log(), /model: gemma4, \d+ layers \(\d+ SWA/, srv.log());
  const list = await oai.models.list();
  assert.equal(list.data.length, 1);
});

test('chat completions, responses and messages answer, created and streamed', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me about the sea.' }];
  const c = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 12, ...G });
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 12);
  assert.ok(c.choices[0].message.content.length > 0);
  assert.equal(c.usage.prompt_tokens, 1 + renderedTokens(messages, false), 'prompt = <bos> + the gemma4 rendering');
  let text = '';
  for await (const ch of await oai.chat.completions.create({ model: 'm', messages, max_tokens: 12, stream: true, ...G }))
    for (const x of ch.choices) text += x.delta.content ?? '';
  assert.equal(text, c.choices[0].message.content);

  // reasoning on: the system turn gains <|think|> and the generation prompt loses the empty channel
  const t = await oai.chat.completions.create({ model: 'm', messages, max_tokens: 4,
    chat_template_kwargs: { enable_thinking: true }, ...G });
  assert.equal(t.usage.prompt_tokens, 1 + renderedTokens(messages, true));
  assert.notEqual(t.usage.prompt_tokens, c.usage.prompt_tokens);

  const r = await oai.responses.create({ model: 'm', instructions: 'Be brief.', input: 'Tell me about the sea.',
    max_output_tokens: 12, ...G });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.usage.output_tokens, 12);
  assert.equal(r.output_text, c.choices[0].message.content, 'the same prompt, the same greedy reply');
  let rtext = '';
  const rs = await oai.responses.create({ model: 'm', instructions: 'Be brief.', input: 'Tell me about the sea.',
    max_output_tokens: 12, stream: true, ...G });
  for await (const ev of rs) if (ev.type === 'response.output_text.delta') rtext += ev.delta;
  assert.equal(rtext, r.output_text);

  const m = await ant.messages.create({ model: 'm', max_tokens: 12, system: 'Be brief.',
    messages: [{ role: 'user', content: 'Tell me about the sea.' }], ...G });
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 12);
  assert.equal(m.content[0].text, c.choices[0].message.content);
  const st = ant.messages.stream({ model: 'm', max_tokens: 12, system: 'Be brief.',
    messages: [{ role: 'user', content: 'Tell me about the sea.' }], ...G });
  const fin = await st.finalMessage();
  assert.deepEqual(fin.content, m.content);
});

test('a JSON Schema constraint holds (chat completions and responses)', async () => {
  const j = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'A point as JSON.' }],
    max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: POINT, strict: true } }, ...G });
  assert.equal(j.choices[0].finish_reason, 'stop', JSON.stringify(j.choices[0]));
  const v = JSON.parse(j.choices[0].message.content);
  assert.deepEqual(Object.keys(v).sort(), ['label', 'x']);
  assert.ok(Number.isInteger(v.x) && v.label.length <= 8);
  const r = await oai.responses.create({ model: 'm', input: 'A point as JSON.', max_output_tokens: 200,
    text: { format: { type: 'json_schema', name: 'p', schema: POINT, strict: true } }, ...G });
  assert.equal(r.status, 'completed', JSON.stringify(r.output));
  const w = JSON.parse(r.output_text);
  assert.ok(Number.isInteger(w.x) && w.label.length <= 8);
});

// ---- tool calls (the CALL_DICT style: <|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>) ----

// a reply with text before the call, spelled in the template's syntax (the stand-in vocabulary
// has no <|tool_call> token, so the markers are text here and the scanner reads their bytes)
const TEXT_AND_CALL = 'start: "Let me check." "<|tool_call>call:get_weather{city:<|\\"|>Rome<|\\"|>,metric:false}<tool_call|>"';

test('chat: a forced call (named and required) in the template syntax comes back as tool_calls, create and stream', () =>
  forcedChat(oai, TEXT_AND_CALL, '{"city": "Rome", "metric": false}'));
test('responses: a forced call (required and named) is a function_call item, create and stream; text before a call is a message item first', () =>
  forcedResponses(oai, TEXT_AND_CALL));
test('messages: a forced call is a tool_use block, create and stream; text before a call stays in order', () =>
  forcedMessages(ant, TEXT_AND_CALL));

test('round trip: the call and its result come back into the prompt as the gemma4 renderer writes them, in each dialect', async () => {
  const args = '{"city": "Paris", "metric": true}';
  const openai = [...Q, { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: args } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '21 C, sunny' }];
  const r = spawnSync(`${TOOLDIR}/lmserve-render`, ['--arch', 'gemma4'], {
    input: JSON.stringify({ messages: openai, tools: CHAT_TOOLS.slice(0, 1), add_generation_prompt: true, enable_thinking: false }),
  });
  assert.equal(r.status, 0, r.stderr.toString());
  const want = r.stdout.toString('utf8');
  assert.ok(want.includes('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,metric:true}<tool_call|>' +
    '<|tool_response>response:get_weather{value:<|"|>21 C, sunny<|"|>}<tool_response|>'), want);
  const prompt = async (dialect, body) => {
    const res = await fetch(`${srv.url}/apply-template?dialect=${dialect}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()).prompt;
  };
  assert.equal(await prompt('chat', { messages: openai, tools: CHAT_TOOLS.slice(0, 1) }), want);
  assert.equal(await prompt('responses', { input: [{ role: 'user', content: 'Weather in Paris?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: args },
    { type: 'function_call_output', call_id: 'call_1', output: '21 C, sunny' }], tools: RSP_TOOLS }), want);
  assert.equal(await prompt('messages', { max_tokens: 8, messages: [...Q,
    { role: 'assistant', content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris', metric: true } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '21 C, sunny' }] }], tools: ANT_TOOLS }), want);
  // and the server answers it (the prompt ends in the model's turn: no generation prompt after a result)
  const c = await oai.chat.completions.create({ model: 'm', messages: openai, tools: CHAT_TOOLS.slice(0, 1), max_tokens: 4, ...G });
  assert.equal(c.choices[0].finish_reason, 'length');
});

test('<eos> (the descriptor\'s end of turn) ends the reply', async () => {
  const eos = spawnSync(`${TOOLDIR}/lmserve-tokenize`, [MODEL, '--special'], { input: '<eos>' }).stdout.toString().trim();
  assert.match(eos, /^\d+$/, 'one token');
  const c = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 8, logit_bias: { [eos]: 100 }, ...G });
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.equal(c.choices[0].message.content, '');
  assert.ok(c.usage.completion_tokens <= 1, JSON.stringify(c.usage)); // the end token itself
});
