// Greedy byte-identity of every KV reuse path (issue 11, docs/kv-cache.md): a reply computed
// through an adopted slot, a prefix copied from another conversation, a sidecar restored from disk
// and a sidecar restored after a restart equals, text and every logprob bit, the reply a cold
// server computes for the same request — at several --prefill-chunk sizes (chunk boundaries) and
// 1, 2 and 3 threads. This holds only because the forward pass is batch-invariant (a token's
// logits do not depend on how many tokens share its pass, where a chunk ends, or the thread count);
// these tests fail if that breaks.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { MODEL, startServer as start } from './harness.mjs';
import { systemPrompt } from './kv.mjs';

// The "small" shape (K = 256 and 512 in the products): the tiny model's 64-wide products are too
// short for a reduction order to show; LMSERVE_MODEL_SMALL from tests/suites/60-e2e.sh.
const SMALL = process.env.LMSERVE_MODEL_SMALL ?? MODEL.replace(/tiny-q8_0\.gguf$/, 'small-q8_0.gguf');
// --log-level debug: the per-request kv plan line (which path ran)
const startServer = (args) => start([...args, '--log-level', 'debug'], { model: SMALL });
const SYS = systemPrompt('delta', 90);
const LP = { logprobs: true, top_logprobs: 3 };
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lmserve-kvid-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

async function ask(srv, messages, maxTokens = 12) {
  const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const r = await oai.chat.completions.create({ model: 'm', messages, max_tokens: maxTokens, temperature: 0, ...LP });
  return { text: r.choices[0].message.content, lp: JSON.stringify(r.choices[0].logprobs), cached: r.usage.prompt_tokens_details.cached_tokens, prompt: r.usage.prompt_tokens };
}

const A1 = [{ role: 'system', content: SYS }, { role: 'user', content: 'Question one about the rules' }];
const B1 = [{ role: 'system', content: SYS }, { role: 'user', content: 'A different conversation entirely' }];
const X = [{ role: 'system', content: systemPrompt('omega', 90) }, { role: 'user', content: 'Unrelated' }];
let a2; // A1 + its cold reply + a second question
const cold = {};

// The reference: every answer computed from an empty cache (an unrelated request in between
// leaves nothing above the 0.1 gate to reuse; asserted through cached_tokens = 0).
before(async () => {
  const srv = await startServer(['--kv-slots', '1', '--batch', '1']);
  try {
    const flush = async () => assert.equal((await ask(srv, X, 1)).cached > 0, false);
    cold.A1 = await ask(srv, A1);
    a2 = [...A1, { role: 'assistant', content: cold.A1.text }, { role: 'user', content: 'And question two' }];
    for (const [k, m] of [['A2', a2], ['B1', B1], ['A1again', A1]]) {
      await flush();
      cold[k] = await ask(srv, m);
      assert.equal(cold[k].cached, 0, `${k} must be cold`);
    }
    assert.equal(cold.A1again.lp, cold.A1.lp, 'a cold server is deterministic');
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
});

const same = (got, want, what) => {
  assert.equal(got.text, want.text, `${what}: text`);
  assert.equal(got.lp, want.lp, `${what}: logprobs (bit for bit)`);
};

for (const threads of [1, 2, 3]) {
  for (const chunk of [16, 100, 512]) {
    test(`adopt and copy paths equal a cold server (--threads ${threads} --prefill-chunk ${chunk})`, async () => {
      const srv = await startServer(['--kv-slots', '2', '--batch', '1', '--threads', String(threads), '--prefill-chunk', String(chunk)]);
      try {
        same(await ask(srv, A1), cold.A1, 'cold at this chunk size and thread count');
        const r2 = await ask(srv, a2);
        assert.ok(r2.cached > 0, 'the follow-up adopts the slot');
        same(r2, cold.A2, 'adopt (follow-up)');
        const b = await ask(srv, B1);
        assert.ok(b.cached > 0, 'B copies the shared system prompt');
        same(b, cold.B1, 'copy (shared prefix)');
        const again = await ask(srv, a2);
        assert.equal(again.cached, again.prompt - 1, 'the donor stayed intact');
        same(again, cold.A2, 'adopt (the same request again)');
      } finally {
        assert.equal((await srv.stop()).code, 0);
      }
      assert.match(srv.log(), /kv: copy -> slot 1 \(copied\)/);
    });
  }
}

// every thread count, each at another chunk boundary (the restart's prefill of the rest is chunked)
for (const [threads, chunk] of [[1, 64], [2, 16], [3, 100]]) {
  test(`disk restore and restart restore equal a cold server (--threads ${threads} --prefill-chunk ${chunk})`, async () => {
    const dir = fs.mkdtempSync(path.join(tmp, 'd-'));
    const args = ['--kv-slots', '1', '--batch', '1', '--kv-cache-dir', dir, '--threads', String(threads), '--prefill-chunk', String(chunk)];
    let srv = await startServer(args);
    try {
      same(await ask(srv, A1), cold.A1, 'cold');
      await ask(srv, X, 1); // evicts A: spilled
      const r = await ask(srv, A1);
      assert.equal(r.cached, r.prompt - 1, 'restored whole: only the last prompt token recomputed');
      same(r, cold.A1, 'disk restore');
    } finally {
      assert.equal((await srv.stop()).code, 0);
    }
    assert.match(srv.log(), /kv disk: spilled/);
    assert.match(srv.log(), /kv: restore -> slot 0/);
    srv = await startServer(args);
    try {
      assert.match(srv.log(), /kv disk: .*, 2 sidecars indexed/, "A (spilled by X) and X (spilled by A's restore)");
      const r2 = await ask(srv, a2);
      assert.ok(r2.cached > 0, 'the restarted server restores the sidecar for the follow-up');
      same(r2, cold.A2, 'restart restore + prefill of the rest');
    } finally {
      assert.equal((await srv.stop()).code, 0);
    }
    assert.match(srv.log(), /kv: restore -> slot 0/);
  });
}
