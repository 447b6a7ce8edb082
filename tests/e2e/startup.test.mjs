// Honest startup: a model made by lmserve-mkmodel (random weights, marked in the file) gets a
// one-line warning at startup and random_weights: true in /v1/models; the model id is the file's
// general.name (no spaces), --alias NAME overrides it, and a bad --alias is refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, BIN, MODEL } from './harness.mjs';

test('random weights: warned at startup and marked in /v1/models', async () => {
  const srv = await startServer();
  try {
    const j = await (await fetch(srv.url + '/v1/models')).json();
    assert.equal(j.data.length, 1);
    assert.equal(j.data[0].id, 'lmserve-mkmodel-tiny-q8_0-seed1');
    assert.equal(j.data[0].random_weights, true);
    const warn = srv.log().split('\n').filter((l) => /RANDOM weights/.test(l));
    assert.equal(warn.length, 1, srv.log());
    assert.match(warn[0], /serve a trained GGUF/);
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
});

test('--alias names the model', async () => {
  const srv = await startServer(['--alias', 'my-model']);
  try {
    const j = await (await fetch(srv.url + '/v1/models')).json();
    assert.equal(j.data[0].id, 'my-model');
    assert.equal((await fetch(srv.url + '/v1/models/my-model')).status, 200);
    assert.equal((await fetch(srv.url + '/v1/models/lmserve-mkmodel-tiny-q8_0-seed1')).status, 404);
    const r = await fetch(srv.url + '/v1/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'my-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    });
    assert.equal(r.status, 200);
    assert.equal((await r.json()).model, 'my-model');
  } finally {
    await srv.stop();
  }
});

test('a bad --alias is refused with a reason', () => {
  for (const bad of ['', 'two words', 'a/b']) {
    const r = spawnSync(BIN, [MODEL, '--alias', bad, '--port', '0'], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 2, `--alias '${bad}': ${r.stderr}`);
    assert.match(r.stderr, /--alias/);
  }
});
