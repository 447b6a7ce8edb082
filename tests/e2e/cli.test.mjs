// The lmserve command line (R-CLI-1): --help, one-line errors with non-zero exits, and
// /health = 503 while the model is still loading.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { BIN, MODEL } from './harness.mjs';

const run = (args) => spawnSync(BIN, args, { encoding: 'utf8', timeout: 30000 });

test('--help lists every flag with its default and exits 0', () => {
  const r = run(['--help']);
  assert.equal(r.status, 0);
  for (const flag of ['--host', '--port', '--ctx', '--threads', '--api-key', '--queue', '--conns', '--max-tokens', '--max-body', '--timeout', '--kv-slots', '--kv-slots-force', '--kv-cache-dir', '--kv-disk-slots', '--prefill-chunk', '--log-level'])
    assert.ok(r.stdout.includes(flag), `--help lacks ${flag}`);
  assert.match(r.stdout, /--port N .*\(default 8080/);
  assert.match(r.stdout, /--max-tokens N[\s\S]*\(default 1024\)/);
  assert.match(r.stdout, /--queue N .*\(default 16\)/);
  assert.match(r.stdout, /--kv-slots N[\s\S]*\(default 1;/);
  assert.ok(!r.stdout.includes('--prefix-reuse'), 'reuse is always on: the old flag is gone');
});

test('a bad flag or value is one line on stderr and a non-zero exit', () => {
  const cases = [
    [[MODEL, '--bogus'], /unknown flag '--bogus'/],
    [[MODEL, '--port', 'abc'], /bad value 'abc' for --port/],
    [[MODEL, '--port', '70000'], /bad value '70000' for --port/],
    [[MODEL, '--queue', '0'], /bad value '0' for --queue/],
    [[MODEL, '--threads'], /--threads needs a value/],
    [[MODEL, '--kv-slots', '0'], /bad value '0' for --kv-slots/],
    [[MODEL, '--kv-cache-dir', ''], /--kv-cache-dir must not be empty/],
    [[MODEL, '--prefix-reuse'], /unknown flag '--prefix-reuse'/],
    [[MODEL, '--log-level', 'loud'], /bad value 'loud' for --log-level/],
    [[], /no model given/],
  ];
  for (const [args, re] of cases) {
    const r = run(args);
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, re);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  }
});

test('a model that cannot be loaded exits 1 with the reason', () => {
  const r = run(['/nonexistent/model.gguf', '--port', '0']);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /cannot load \/nonexistent\/model\.gguf/);
  const junk = path.join(os.tmpdir(), `lmserve-junk-${process.pid}.gguf`);
  fs.writeFileSync(junk, 'this is not a gguf file at all');
  try {
    const j = run([junk, '--port', '0']);
    assert.equal(j.status, 1);
    assert.match(j.stderr, /cannot load/);
  } finally {
    fs.unlinkSync(junk);
  }
});

test('/health is 503 while the model loads (a FIFO holds the load), API calls are 503 too', { timeout: 30000 }, async (t) => {
  const fifo = path.join(os.tmpdir(), `lmserve-fifo-${process.pid}.gguf`);
  execFileSync('mkfifo', [fifo]);
  const port = await new Promise((res) => { const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); }); });
  const proc = spawn(BIN, [fifo, '--port', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  t.after(() => { proc.kill('SIGKILL'); fs.rmSync(fifo, { force: true }); }); // also on a timeout
  let err = '';
  proc.stderr.on('data', (d) => (err += d));
  const exited = new Promise((r) => proc.on('exit', (code) => r(code)));
  try {
    let h = null;
    for (let i = 0; i < 400 && !h; i++) {
      try { h = await fetch(`http://127.0.0.1:${port}/health`); } catch { await new Promise((r) => setTimeout(r, 25)); }
    }
    assert.ok(h, err);
    assert.equal(h.status, 503);
    assert.equal((await h.json()).status, 'loading model');
    const c = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"messages":[{"role":"user","content":"hi"}]}' });
    assert.equal(c.status, 503);
    // opening the FIFO for writing unblocks the load, which then fails cleanly (it may close its
    // end before reading anything: EPIPE here is fine)
    try { fs.writeFileSync(fifo, 'not a model'); } catch (e) { if (e.code !== 'EPIPE') throw e; }
    assert.equal(await exited, 1);
    assert.match(err, /cannot load/);
  } finally {
    proc.kill('SIGKILL');
  }
});

test('SIGTERM while the model is still loading exits 0 at once', { timeout: 20000 }, async (t) => {
  const fifo = path.join(os.tmpdir(), `lmserve-fifo2-${process.pid}.gguf`);
  execFileSync('mkfifo', [fifo]);
  const port = await new Promise((res) => { const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); }); });
  const proc = spawn(BIN, [fifo, '--port', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  t.after(() => { proc.kill('SIGKILL'); fs.rmSync(fifo, { force: true }); }); // also on a timeout
  const exited = new Promise((r) => proc.on('exit', (code) => r(code)));
  try {
    let h = null;
    for (let i = 0; i < 400 && !h; i++) {
      try { h = await fetch(`http://127.0.0.1:${port}/health`); } catch { await new Promise((r) => setTimeout(r, 25)); }
    }
    assert.equal(h?.status, 503, 'listening and loading');
    proc.kill('SIGTERM');
    assert.equal(await exited, 0);
  } finally {
    proc.kill('SIGKILL');
  }
});
