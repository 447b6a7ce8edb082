// Request parameters real clients send (issue 17 items 4, 6): logit_bias forcing and banning a
// token, llama.cpp's constraint fields actually constraining, --reasoning as the server default,
// /tokenize and /detokenize in llama-server's shapes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, USER } from './harness.mjs';
import { serverForFile, postJSON as post } from './fixture.mjs';

const h = serverForFile();
const GREEDY = { temperature: 0 };

test('tokenize / detokenize: ids, pieces, special tokens, round trip, errors', async () => {
  const t = await post(h.srv.url, '/tokenize', { content: 'Hello world<|im_end|>' });
  assert.equal(t.status, 200, t.text);
  assert.ok(Array.isArray(t.json.tokens) && t.json.tokens.every(Number.isInteger));
  assert.equal(t.json.tokens.at(-1), 151645, 'parse_special (default true) makes <|im_end|> one token');
  const plain = await post(h.srv.url, '/tokenize', { content: '<|im_end|>', parse_special: false });
  assert.ok(plain.json.tokens.length > 1 && !plain.json.tokens.includes(151645));
  const p = await post(h.srv.url, '/v1/tokenize', { content: 'Hello world', with_pieces: true, add_special: true });
  assert.equal(p.status, 200, p.text);
  assert.deepEqual(p.json.tokens.map((x) => x.piece).join(''), 'Hello world');
  assert.ok(p.json.tokens.every((x) => Number.isInteger(x.id)));
  const d = await post(h.srv.url, '/detokenize', { tokens: t.json.tokens });
  assert.deepEqual(d.json, { content: 'Hello world<|im_end|>' });
  // a piece that is half a UTF-8 sequence comes back as its bytes
  const e = await post(h.srv.url, '/tokenize', { content: '\u{1F600}', with_pieces: true });
  const joined = Buffer.concat(e.json.tokens.map((x) => (typeof x.piece === 'string' ? Buffer.from(x.piece) : Buffer.from(x.piece))));
  assert.equal(joined.toString('utf8'), '\u{1F600}');
  for (const [path, body, param] of [['/tokenize', {}, 'content'], ['/tokenize', { content: 5 }, 'content'],
    ['/detokenize', { tokens: [1, 'x'] }, 'tokens'], ['/detokenize', { tokens: [1 << 30] }, 'tokens'], ['/detokenize', {}, 'tokens']]) {
    const r = await post(h.srv.url, path, body);
    assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.json.error.param, param);
  }
});

async function tokenOf(text) {
  const t = await post(h.srv.url, '/tokenize', { content: text, parse_special: false });
  return t.json.tokens;
}

test('logit_bias: +100 forces a token, -100 bans the greedy one (chat, responses)', async () => {
  const [hello] = await tokenOf('Hello');
  const forced = await h.oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 4, ...GREEDY, logit_bias: { [hello]: 100 } });
  assert.equal(forced.choices[0].message.content, 'Hello'.repeat(4));
  const rf = await post(h.srv.url, '/v1/responses', { model: 'm', input: 'Hi', max_output_tokens: 3, ...GREEDY, logit_bias: { [hello]: 100 } });
  assert.equal(rf.status, 200, rf.text);
  assert.equal(rf.json.output[0].content[0].text, 'Hello'.repeat(3));
  // the greedy first token, then banned
  const g = await h.oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 1, ...GREEDY, logprobs: true });
  const first = g.choices[0].logprobs.content[0];
  const ids = await tokenOf(Buffer.from(first.bytes).toString('utf8'));
  assert.equal(ids.length, 1, `the greedy token ${JSON.stringify(first.token)} retokenizes to one id`);
  const banned = await h.oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 1, ...GREEDY, logprobs: true, logit_bias: { [ids[0]]: -100 } });
  assert.notEqual(banned.choices[0].logprobs.content[0].token, first.token);
  for (const [lb, why] of [[{ x: 1 }, 'key'], [{ 5: 101 }, 'range'], [{ 5: 'a' }, 'type'], [[1], 'array'], [{ 99999999: 1 }, 'vocab']]) {
    const r = await post(h.srv.url, '/v1/chat/completions', { model: 'm', messages: USER, max_tokens: 1, logit_bias: lb });
    assert.equal(r.status, 400, `${why}: ${r.text}`);
    assert.equal(r.json.error.param, 'logit_bias', why);
  }
});

// bounded, so even a random model must finish well within max_tokens
const SCHEMA = { type: 'object', properties: { n: { type: 'integer', minimum: -1000, maximum: 1000 }, s: { type: 'string', maxLength: 5 } }, required: ['n', 's'], additionalProperties: false };
function checkSchema(text) {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).sort(), ['n', 's']);
  assert.ok(Number.isInteger(v.n), text);
  assert.ok(typeof v.s === 'string' && [...v.s].length <= 5, text); // code points
}

test('llama.cpp constraints: top-level json_schema and response_format json_object + schema constrain the reply', async () => {
  const a = await h.oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 200, json_schema: SCHEMA });
  checkSchema(a.choices[0].message.content);
  const b = await h.oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 200, response_format: { type: 'json_object', schema: SCHEMA } });
  checkSchema(b.choices[0].message.content);
  const s = await h.oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 200, json_schema: SCHEMA, stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
  checkSchema(text);
  const bad = await post(h.srv.url, '/v1/chat/completions', { model: 'm', messages: USER, max_tokens: 5, json_schema: 'x' });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'json_schema');
  const two = await post(h.srv.url, '/v1/chat/completions', { model: 'm', messages: USER, max_tokens: 5, json_schema: SCHEMA, regex: 'a+' });
  assert.equal(two.status, 400, two.text);
});

// llama.cpp's `grammar` (GBNF) is honored on every generating endpoint, not only chat (whose
// stream and bad-grammar 400 are in grammar.test.mjs): the reply parses against the grammar.
test('grammar (GBNF) constrains chat, completions, responses and messages', async () => {
  const grammar = 'root ::= ("yes" | "no") " " [0-9]{2}';
  const re = /^(yes|no) [0-9]{2}$/;
  const seeds = [1, 2];
  for (const seed of seeds) {
    const chat = await post(h.srv.url, '/v1/chat/completions', { messages: USER, max_tokens: 10, temperature: 1, seed, grammar });
    assert.equal(chat.status, 200, chat.text);
    assert.match(chat.json.choices[0].message.content, re);
    const cmp = await post(h.srv.url, '/v1/completions', { prompt: 'Answer:', max_tokens: 10, temperature: 1, seed, grammar });
    assert.equal(cmp.status, 200, cmp.text);
    assert.match(cmp.json.choices[0].text, re);
    const rsp = await post(h.srv.url, '/v1/responses', { input: 'Answer', max_output_tokens: 10, temperature: 1, grammar });
    assert.equal(rsp.status, 200, rsp.text);
    const out = rsp.json.output.find((o) => o.type === 'message').content[0].text;
    assert.match(out, re);
    const msg = await post(h.srv.url, '/v1/messages', { messages: USER, max_tokens: 10, temperature: 1, grammar });
    assert.equal(msg.status, 200, msg.text);
    assert.match(msg.json.content.find((c) => c.type === 'text').text, re);
  }
  const bad = await post(h.srv.url, '/v1/messages', { messages: USER, max_tokens: 4, grammar: 'root ::= nope' });
  assert.equal(bad.status, 400, bad.text);
  assert.match(JSON.stringify(bad.json), /nope/);
});

test('--reasoning on: the server-wide default when a request says nothing', async () => {
  const on = await startServer(['--reasoning', 'on']);
  try {
    const body = { messages: USER };
    const dflt = (await post(on.url, '/apply-template?dialect=chat', body)).json.prompt;
    assert.ok(dflt.endsWith('<|im_start|>assistant\n'), JSON.stringify(dflt.slice(-40)));
    const off = (await post(on.url, '/apply-template?dialect=chat', { ...body, reasoning_effort: 'none' })).json.prompt;
    assert.ok(off.endsWith('<think>\n\n</think>\n\n'));
    const msg = (await post(on.url, '/apply-template?dialect=messages', { max_tokens: 4, messages: USER })).json.prompt;
    assert.equal(msg, dflt);
    const rsp = (await post(on.url, '/apply-template?dialect=responses', { input: USER })).json.prompt;
    assert.equal(rsp, dflt);
  } finally {
    assert.equal((await on.stop()).code, 0, on.log());
  }
  const plain = (await post(h.srv.url, '/apply-template?dialect=chat', { messages: USER })).json.prompt;
  assert.ok(plain.endsWith('<think>\n\n</think>\n\n'), 'default off');
});
