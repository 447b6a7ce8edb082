// The forced-call checks every family with a call style runs (tests/e2e/gemma4.test.mjs,
// qwen35.test.mjs): a get_weather tool with bounded arguments (an enum, a boolean, so a random
// model under the forced grammar always finishes), forced with each dialect's tool_choice forms,
// created and streamed, and a reply with text before a call spelled in the family's own syntax by
// a lark grammar (TEXT_AND_CALL, calling get_weather with city Rome, metric false).
import assert from 'node:assert/strict';

export const WEATHER = {
  type: 'object', required: ['city', 'metric'],
  properties: { city: { type: 'string', enum: ['Paris', 'Rome'] }, metric: { type: 'boolean' } },
};
export const validWeather = (a) => ['Paris', 'Rome'].includes(a.city) && typeof a.metric === 'boolean' &&
  Object.keys(a).sort().join() === 'city,metric';
export const CHAT_TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather now.', parameters: WEATHER, strict: true } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } }];
export const RSP_TOOLS = [{ type: 'function', name: 'get_weather', description: 'Weather now.', parameters: WEATHER, strict: true }];
export const ANT_TOOLS = [{ name: 'get_weather', description: 'Weather now.', input_schema: WEATHER }];
export const Q = [{ role: 'user', content: 'Weather in Paris?' }];
const G = { temperature: 0 };
const ROME = { city: 'Rome', metric: false };

// Chat Completions: named and required, create and stream (the same call, greedy); then
// TEXT_AND_CALL gives content "Let me check." and the call (arguments exactly `exactArgs` when
// given, else equal to ROME as JSON).
export async function forcedChat(oai, textAndCall, exactArgs = null) {
  for (const tool_choice of [{ type: 'function', function: { name: 'get_weather' } }, 'required']) {
    const base = { model: 'm', messages: Q, tools: CHAT_TOOLS.slice(0, tool_choice === 'required' ? 1 : 2), tool_choice, max_tokens: 200, ...G };
    const c = await oai.chat.completions.create(base);
    const ch = c.choices[0];
    assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch));
    assert.equal(ch.message.content, null);
    assert.equal(ch.message.tool_calls.length, 1);
    const tc = ch.message.tool_calls[0];
    assert.equal(tc.type, 'function');
    assert.equal(tc.function.name, 'get_weather');
    assert.ok(validWeather(JSON.parse(tc.function.arguments)), tc.function.arguments);
    let args = '', name = '', finish = null, content = '';
    for await (const k of await oai.chat.completions.create({ ...base, stream: true })) {
      const d = k.choices[0];
      if (!d) continue;
      content += d.delta.content ?? '';
      for (const t of d.delta.tool_calls ?? []) { name += t.function?.name ?? ''; args += t.function?.arguments ?? ''; }
      finish = d.finish_reason ?? finish;
    }
    assert.equal(content, '');
    assert.equal(name, 'get_weather');
    assert.equal(args, tc.function.arguments, 'greedy: the same call streamed');
    assert.equal(finish, 'tool_calls');
  }
  const t = await oai.chat.completions.create({ model: 'm', messages: Q, tools: CHAT_TOOLS, max_tokens: 200, lark: textAndCall, ...G });
  assert.equal(t.choices[0].message.content, 'Let me check.');
  assert.deepEqual(t.choices[0].message.tool_calls.map((x) => x.function.name), ['get_weather']);
  const a = t.choices[0].message.tool_calls[0].function.arguments;
  if (exactArgs !== null) assert.equal(a, exactArgs);
  else assert.deepEqual(JSON.parse(a), ROME);
}

// Responses: required and named, a single function_call item, create and stream (one
// function_call_arguments.done event with the same arguments); TEXT_AND_CALL gives a message
// item, then the call.
export async function forcedResponses(oai, textAndCall) {
  for (const tool_choice of ['required', { type: 'function', name: 'get_weather' }]) {
    const base = { model: 'm', input: 'Weather in Paris?', tools: RSP_TOOLS, tool_choice, max_output_tokens: 200, ...G };
    const r = await oai.responses.create(base);
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.output.map((o) => o.type), ['function_call']);
    const fc = r.output[0];
    assert.equal(fc.name, 'get_weather');
    assert.ok(validWeather(JSON.parse(fc.arguments)), fc.arguments);
    assert.match(fc.call_id, /^call_/);
    const s = oai.responses.stream(base);
    const events = [];
    s.on('event', (e) => events.push(e));
    const fin = await s.finalResponse();
    const done = events.filter((e) => e.type === 'response.function_call_arguments.done');
    assert.equal(done.length, 1);
    assert.equal(done[0].arguments, fc.arguments);
    assert.deepEqual(fin.output.map((o) => [o.type, o.name, o.arguments]), [['function_call', 'get_weather', fc.arguments]]);
  }
  const t = await oai.responses.create({ model: 'm', input: 'Weather in Paris?', tools: RSP_TOOLS, max_output_tokens: 200, lark: textAndCall, ...G });
  assert.deepEqual(t.output.map((o) => o.type), ['message', 'function_call']);
  assert.equal(t.output_text, 'Let me check.');
  assert.deepEqual(JSON.parse(t.output[1].arguments), ROME);
}

// Messages: tool and any, a single tool_use block, create and stream; TEXT_AND_CALL gives a
// text block, then the tool_use.
export async function forcedMessages(ant, textAndCall) {
  const base = { model: 'm', max_tokens: 200, messages: Q, tools: ANT_TOOLS, ...G };
  for (const tool_choice of [{ type: 'tool', name: 'get_weather' }, { type: 'any' }]) {
    const m = await ant.messages.create({ ...base, tool_choice });
    assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
    assert.deepEqual(m.content.map((b) => b.type), ['tool_use']);
    assert.equal(m.content[0].name, 'get_weather');
    assert.ok(validWeather(m.content[0].input), JSON.stringify(m.content[0].input));
    const fin = await ant.messages.stream({ ...base, tool_choice }).finalMessage();
    assert.equal(fin.stop_reason, 'tool_use');
    assert.deepEqual(fin.content.map((b) => [b.type, b.name, b.input]), [['tool_use', 'get_weather', m.content[0].input]]);
  }
  const t = await ant.messages.create({ ...base, lark: textAndCall });
  assert.deepEqual(t.content.map((b) => b.type), ['text', 'tool_use']);
  assert.equal(t.content[0].text, 'Let me check.');
  assert.deepEqual(t.content[1].input, ROME);
  assert.equal(t.stop_reason, 'tool_use');
}
