// Grammar budgets through the server (issue 10 item 4, docs/grammar.md "Budgets"): the issue's
// 15 KB regex is a 400 naming `regex` on every dialect, streaming or not, and the worker serves
// the next request normally.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, USER } from './harness.mjs';

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
  assert.match(ok.choices[0].message.content, /^(a|bb)*$/);
});
