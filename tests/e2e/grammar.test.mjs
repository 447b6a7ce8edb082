// Grammar constraints through the server. Budgets (issue 10 item 4, docs/grammar.md "Budgets"):
// the issue's 15 KB regex is a 400 naming `regex` on every dialect, streaming or not, and the
// worker serves the next request normally. Tidy JSON by default (docs/jsonschema.md).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, USER, jsonGaps as gaps } from './harness.mjs';

let srv;
before(async () => { srv = await startServer(['--threads', '1']); });
after(async () => { assert.equal((await srv.stop()).code, 0, srv.log()); });

// 3000 alternatives (a, b, ..., h, aa, ab, ...) under {0,5000}: about 15 KB.
function issueRegex() {
  const alts = [];
  for (let len = 1; alts.length < 3000; len++) {
    for (let x = 0; x < 8 ** len && alts.length < 3000; x++) {
      let s = '';
      for (let k = 0, y = x; k < len; k++, y = Math.floor(y / 8)) s = String.fromCharCode(97 + (y % 8)) + s;
      alts.push(s);
    }
  }
  return `(${alts.join('|')}){0,5000}`;
}

test('the 15 KB alternation regex is a 400 naming regex, then the worker serves', { timeout: 60000 }, async () => {
  const regex = issueRegex();
  assert.ok(regex.length > 14000);
  const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  for (const stream of [false, true]) {
    await assert.rejects(
      (async () => {
        const r = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 64, regex, stream });
        if (stream) for await (const _ of r) { /* drain */ }
      })(),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'regex' && /budget/.test(e.message),
      `stream ${stream}`);
  }
  await assert.rejects(oai.responses.create({ model: 'm', input: USER, max_output_tokens: 64, regex }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'regex');
  const ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(ant.messages.create({ model: 'm', messages: USER, max_tokens: 64, regex }),
    (e) => e instanceof Anthropic.BadRequestError && /budget/.test(e.message));
  const ok = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, regex: '(a|bb){0,5000}' });
  // cut by max_tokens the reply is a prefix of the language (it may end inside a "bb");
  // finished, it is a whole sentence of it
  const whole = ok.choices[0].finish_reason === 'stop';
  assert.match(ok.choices[0].message.content, whole ? /^(a|bb)*$/ : /^(a|bb)*b?$/,
    `finish_reason ${ok.choices[0].finish_reason}`);
});

// Tidy JSON by default (issue 19 item 4): whitespace only as single spaces after `,` and `:`;
// `x-whitespace: "pretty"` allows bounded indentation. Sampled at temperature 1 over several
// seeds, so the random tiny model explores the whitespace the grammar allows.
const TWO_FIELDS = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
  required: ['name', 'age'],
  additionalProperties: false,
};


test('a constrained reply is tidy JSON by default; pretty is bounded', { timeout: 120000 }, async () => {
  const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  let seen = 0;
  for (let seed = 1; seed <= 6; seed++) {
    const r = await oai.chat.completions.create({
      model: 'm', messages: USER, max_tokens: 60, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'p', schema: TWO_FIELDS } },
    });
    const text = r.choices[0].message.content;
    for (const [ws, before] of gaps(text)) {
      seen++;
      assert.equal(ws, ' ', `whitespace run ${JSON.stringify(ws)} in ${text}`);
      assert.ok(before === ',' || before === ':', `a space after ${before} in ${text}`);
    }
    if (r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(text).age, 'number');
  }
  let longest = 0;
  for (let seed = 1; seed <= 4; seed++) {
    const r = await oai.chat.completions.create({
      model: 'm', messages: USER, max_tokens: 80, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { ...TWO_FIELDS, 'x-whitespace': 'pretty' } } },
    });
    for (const [ws] of gaps(r.choices[0].message.content)) {
      longest = Math.max(longest, ws.length);
      assert.ok(ws.length <= 201 && (ws.match(/\n/g) ?? []).length <= 1, JSON.stringify(ws));
    }
  }
  console.log(`tidy: ${seen} whitespace runs, all single spaces after , or :; pretty: longest run ${longest}`);
});

// GBNF (llama.cpp's `grammar` parameter, issue 19 item 5): constrains the reply; a bad grammar
// is a 400 naming `grammar` and the rule.
test('grammar (GBNF) constrains the reply; an undefined rule is a 400 naming it', async () => {
  const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const grammar = 'root ::= item{2,3}\nitem ::= "- " [a-z]{1,8} "\\n"\n';
  for (const stream of [false, true]) {
    let text = '';
    if (stream) {
      for await (const c of await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 60, grammar, stream })) text += c.choices[0]?.delta?.content ?? '';
    } else {
      text = (await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 60, grammar })).choices[0].message.content;
    }
    assert.match(text, /^(- [a-z]{1,8}\n){2,3}$/, text);
  }
  await assert.rejects(oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 8, grammar: 'root ::= item+\n' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'grammar' && /undefined rule item/.test(e.message));
});
