// The set-up e2e files share: one server for the whole file (started before its tests, stopped
// after them; a non-zero exit code fails the file with the server's log), an OpenAI client on it,
// and a JSON POST helper. harness.mjs stays free of node:test (the load scripts import it).
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './harness.mjs';

// POSTs body as JSON with fetch: { status, text, json (null when the reply is not JSON) }.
export async function postJSON(url, path, body) {
  const r = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, text, json: (() => { try { return JSON.parse(text); } catch { return null; } })() };
}

// Registers the file's before / after hooks; returns { srv, oai, post(path, body) }, filled in
// once `before` ran (use it inside tests only).
export function serverForFile(args = []) {
  const h = { srv: null, oai: null, post: (path, body) => postJSON(h.srv.url, path, body) };
  before(async () => {
    h.srv = await startServer(args);
    h.oai = new OpenAI({ baseURL: `${h.srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const r = await h.srv.stop();
    assert.equal(r.code, 0, h.srv.log());
  });
  return h;
}
