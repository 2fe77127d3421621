/**
 * The producer client against a scripted control socket (a real Unix
 * socket speaking docs/control.md): framing, the raw payload after the
 * JSON, idempotency keys and the repeat of a lost answer or an unknown
 * outcome, ids as numbers, refusals with the supervisor's code and words,
 * the event stream, questions and answers, following one item to its end
 * across broken connections; and the config reader.
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, test } from "node:test";

import { Client, WfhostError, stateDirOf } from "../dist/client/index.js";

const dirs: string[] = [];
const servers: Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "wfts-"));
  dirs.push(d);
  return d;
}

function rawFrame(json: string): Buffer {
  const body = Buffer.from(json);
  const h = Buffer.alloc(4);
  h.writeUInt32BE(body.length);
  return Buffer.concat([h, body]);
}

const frame = (value: unknown): Buffer => rawFrame(JSON.stringify(value));

interface Received {
  request: Record<string, unknown>;
  payload: Buffer;
  socket: Socket;
}

/** A control socket that hands each request (and its raw payload) to `answer`. */
async function server(answer: (r: Received, n: number) => void): Promise<string> {
  const path = join(tempDir(), "wfhost.sock");
  let n = 0;
  const srv = createServer((socket) => {
    let buf = Buffer.alloc(0);
    let done = false;
    socket.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (done || buf.length < 4) return;
      const len = buf.readUInt32BE(0);
      if (buf.length < 4 + len) return;
      const request = JSON.parse(buf.subarray(4, 4 + len).toString()) as Record<string, unknown>;
      const want = Number(request["payload_bytes"] ?? 0);
      if (buf.length < 4 + len + want) return;
      done = true;
      answer({ request, payload: buf.subarray(4 + len, 4 + len + want), socket }, ++n);
    });
    socket.on("error", () => undefined);
  });
  servers.push(srv);
  await new Promise<void>((resolve) => srv.listen(path, resolve));
  return path;
}

/** A control socket that keeps each connection and answers every request on it, as the supervisor does; counts connections. */
async function keepingServer(answer: (request: Record<string, unknown>, n: number) => Buffer | null): Promise<{ path: string; connections: () => number }> {
  const path = join(tempDir(), "wfhost.sock");
  let connections = 0;
  let n = 0;
  const srv = createServer((socket) => {
    connections++;
    let buf = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        if (buf.length < 4) return;
        const len = buf.readUInt32BE(0);
        if (buf.length < 4 + len) return;
        const request = JSON.parse(buf.subarray(4, 4 + len).toString()) as Record<string, unknown>;
        const want = Number(request["payload_bytes"] ?? 0);
        if (buf.length < 4 + len + want) return;
        buf = buf.subarray(4 + len + want);
        const reply = answer(request, ++n);
        if (reply === null) socket.destroy();
        else socket.write(reply);
      }
    });
    socket.on("error", () => undefined);
  });
  servers.push(srv);
  await new Promise<void>((resolve) => srv.listen(path, resolve));
  return { path, connections: () => connections };
}

describe("kept connections", () => {
  test("sends and results go on one kept connection; a refusal is not kept; close() ends them", async () => {
    const { path, connections } = await keepingServer((r, n) =>
      r["deployment"] === "nowhere"
        ? frame({ ok: false, code: 1, error: "no deployment nowhere" })
        : r["cmd"] === "send"
          ? frame({ ok: true, data: { deployment: "orders", id: n, new: true } })
          : frame({ ok: true, data: { id: r["id"], deployment: "orders", ended: false, state: "inbox", outcome: null, reason: null, result: null } }),
    );
    const client = new Client({ socket: path });
    for (let i = 0; i < 20; i++) await client.send("orders", `item ${i}`);
    const r = await client.mailResult(3);
    assert.equal(r.ended, false);
    assert.equal(connections(), 1, "twenty sends and a result on one connection");
    await assert.rejects(client.send("nowhere", "x"), /no deployment nowhere/);
    await client.send("orders", "after a refusal");
    assert.equal(connections(), 2, "the refused request's connection is not used again");
    client.close();
    await client.send("orders", "after close");
    assert.equal(connections(), 3);
    client.close();
  });

  test("a kept connection the supervisor closed is replaced without a lost answer", async () => {
    const { path, connections } = await keepingServer((_r, n) =>
      // The second request finds its connection closed under it.
      n === 2 ? null : frame({ ok: true, data: { deployment: "orders", id: n, new: true } }),
    );
    const client = new Client({ socket: path });
    assert.equal((await client.send("orders", "a")).id, 1);
    assert.equal((await client.send("orders", "b")).id, 3, "sent again on a new connection");
    assert.equal(connections(), 2);
    client.close();
  });
});

describe("send", () => {
  test("writes the JSON then the raw payload, always with a key, and returns the id as a number", async () => {
    const seen: Received[] = [];
    const path = await server((r) => {
      seen.push(r);
      // The largest id a number holds exactly.
      r.socket.end(rawFrame('{"ok":true,"data":{"deployment":"orders","id":9007199254740991,"new":true}}'));
    });
    const client = new Client({ socket: path });
    const sent = await client.send("orders", Uint8Array.of(0, 1, 2, 255));
    assert.deepEqual(sent, { deployment: "orders", id: Number.MAX_SAFE_INTEGER, new: true });
    assert.equal(typeof sent.id, "number", "ids are numbers, as in event bodies");
    const r = seen[0]!;
    assert.equal(r.request["v"], 2);
    assert.equal(r.request["cmd"], "send");
    assert.equal(r.request["deployment"], "orders");
    assert.equal(r.request["payload_bytes"], 4);
    assert.match(String(r.request["key"]), /^auto-[0-9a-f]{32}$/, "a random key when none is given");
    assert.deepEqual([...r.payload], [0, 1, 2, 255]);
    await client.send("orders", "hi", { key: "order-9" });
    assert.equal(seen[1]!.request["key"], "order-9");
    assert.equal(seen[1]!.payload.toString(), "hi");
  });

  test("an answer lost after the request was written is retried under the same key", async () => {
    const keys: unknown[] = [];
    const path = await server((r, n) => {
      keys.push(r.request["key"]);
      if (n < 3) r.socket.destroy();
      else r.socket.end(frame({ ok: true, data: { deployment: "orders", id: 7, new: false } }));
    });
    const sent = await new Client({ socket: path }).send("orders", "x", { key: "order-7" });
    assert.deepEqual(sent, { deployment: "orders", id: 7, new: false }, "with the caller's key, the supervisor's answer as is");
    assert.equal(keys.length, 3);
    assert.deepEqual(keys, ["order-7", "order-7", "order-7"], "one key for every try");
  });

  test("an id that is not a safe integer is refused with a clear error, never rounded", async () => {
    for (const id of ["9007199254740992", "18446744073709551615", "-1", "1.5"]) {
      const path = await server((r) => r.socket.end(rawFrame(`{"ok":true,"data":{"deployment":"orders","id":${id},"new":true}}`)));
      await assert.rejects(new Client({ socket: path }).send("orders", "x"), (e: unknown) => {
        assert.ok(e instanceof WfhostError);
        assert.equal(e.code, 1);
        assert.equal(e.outcomeUnknown, false);
        assert.ok(
          e.message.startsWith(`the supervisor accepted the mail but answered its id as ${id}, which is not a safe integer (0 to 2^53 - 1)`),
          e.message,
        );
        return true;
      });
    }
  });

  test("after five lost answers it gives up, naming the key to retry with", async () => {
    let n = 0;
    const path = await server((r) => {
      n++;
      r.socket.destroy();
    });
    await assert.rejects(new Client({ socket: path }).send("orders", "x", { key: "k1" }), (e: unknown) => {
      assert.ok(e instanceof WfhostError);
      assert.equal(e.code, 3);
      assert.equal(e.answerLost, true);
      assert.equal(e.outcomeUnknown, true, "a lost answer leaves the outcome unknown");
      assert.match(e.message, /tried 5 times under idempotency key "k1"/);
      return true;
    });
    assert.equal(n, 5);
  });

  test("an unknown outcome is repeated under the same key; the mail landing on the first try is this call's: new", async () => {
    const seen: Received[] = [];
    const path = await server((r, n) => {
      seen.push(r);
      if (n === 1) {
        r.socket.end(frame({ ok: false, code: 1, outcome: "unknown", error: "the store failed while committing mail of orders: disk I/O error" }));
      } else {
        r.socket.end(frame({ ok: true, data: { deployment: "orders", id: 12, new: false } }));
      }
    });
    const client = new Client({ socket: path });
    const sent = await client.send("orders", "order 12");
    assert.deepEqual(sent, { deployment: "orders", id: 12, new: true }, "our own random key can only name this call's mail");
    assert.equal(seen.length, 2);
    const key = seen[0]!.request["key"];
    assert.match(String(key), /^auto-[0-9a-f]{32}$/);
    assert.equal(seen[1]!.request["key"], key, "the repeat goes under the same key");
    assert.deepEqual(
      seen.map((r) => r.payload.toString()),
      ["order 12", "order 12"],
      "and the same payload",
    );

    // With the caller's key, the supervisor's answer is reported as is.
    seen.length = 0;
    const again = await client.send("orders", "order 12", { key: "order-12" });
    assert.equal(seen.length, 1, "answered on the first try");
    assert.deepEqual(again, { deployment: "orders", id: 12, new: false });
  });

  test("with the caller's key, an unknown outcome then new: false is reported as new: false", async () => {
    const keys: unknown[] = [];
    const path = await server((r, n) => {
      keys.push(r.request["key"]);
      if (n === 1) r.socket.end(frame({ ok: false, code: 1, outcome: "unknown", error: "commit failed" }));
      else r.socket.end(frame({ ok: true, data: { deployment: "orders", id: 3, new: false } }));
    });
    const sent = await new Client({ socket: path }).send("orders", "x", { key: "order-3" });
    assert.deepEqual(sent, { deployment: "orders", id: 3, new: false });
    assert.deepEqual(keys, ["order-3", "order-3"]);
  });

  test("a lost answer then new: false, under the client's own key, is reported as new", async () => {
    const keys: unknown[] = [];
    const path = await server((r, n) => {
      keys.push(r.request["key"]);
      if (n === 1) r.socket.destroy();
      else r.socket.end(frame({ ok: true, data: { deployment: "orders", id: 4, new: false } }));
    });
    const sent = await new Client({ socket: path }).send("orders", "x");
    assert.deepEqual(sent, { deployment: "orders", id: 4, new: true });
    assert.equal(keys.length, 2);
    assert.equal(keys[0], keys[1]);
  });

  test("when every try ends unknown it throws, saying the outcome is unknown, with the supervisor's error and the key", async () => {
    const keys: unknown[] = [];
    const at: number[] = [];
    const path = await server((r) => {
      keys.push(r.request["key"]);
      at.push(Date.now());
      r.socket.end(frame({ ok: false, code: 1, outcome: "unknown", error: "the store failed at the commit: disk full" }));
    });
    await assert.rejects(new Client({ socket: path }).send("orders", "x", { key: "order-5" }), (e: unknown) => {
      assert.ok(e instanceof WfhostError);
      assert.equal(e.code, 1);
      assert.equal(e.outcomeUnknown, true);
      assert.equal(e.answerLost, false);
      assert.match(e.message, /^the outcome of sending to "orders" is unknown/);
      assert.ok(e.message.includes("the store failed at the commit: disk full"), e.message);
      assert.match(e.message, /tried 5 times under idempotency key "order-5": the mail may have been accepted, and sending again with key "order-5" enqueues it at most once/);
      return true;
    });
    assert.deepEqual(keys, Array(5).fill("order-5"), "five tries, one key");
    // The lost-answer path's pauses: 100, 200, 400, 800 ms.
    const gaps = at.slice(1).map((t, i) => t - at[i]!);
    gaps.forEach((g, i) => assert.ok(g >= 100 * 2 ** i - 5, `pause ${i}: ${g} ms`));
  });

  test("a refusal carries the supervisor's code and words and is not retried", async () => {
    let n = 0;
    const path = await server((r) => {
      n++;
      r.socket.end(frame({ ok: false, code: 1, error: 'unknown deployment "billing"; known deployments: orders' }));
    });
    await assert.rejects(new Client({ socket: path }).send("billing", "x"), (e: unknown) => {
      assert.ok(e instanceof WfhostError);
      assert.equal(e.code, 1);
      assert.equal(e.message, 'unknown deployment "billing"; known deployments: orders');
      assert.equal(e.outcomeUnknown, false);
      assert.equal(e.answerLost, false);
      return true;
    });
    assert.equal(n, 1);
  });

  test("no supervisor is 'unreachable' (code 3), naming the socket", async () => {
    const path = join(tempDir(), "wfhost.sock");
    await assert.rejects(new Client({ socket: path }).status(), (e: unknown) => {
      assert.ok(e instanceof WfhostError);
      assert.equal(e.code, 3);
      assert.ok(e.message.includes(path) && e.message.includes("is `wfhost supervise` running"), e.message);
      return true;
    });
  });
});

describe("mail-result and call", () => {
  const done = (over: Record<string, unknown> = {}) => ({
    ok: true,
    data: {
      id: 17,
      deployment: "billing",
      ended: true,
      state: "done",
      outcome: "succeeded",
      reason: null,
      result: Buffer.from([0, 255, 128, 10]).toString("base64"),
      result_bytes: 4,
      ...over,
    },
  });

  test("mailResult asks with wait_ms and decodes the base64 result; without waitMs it asks to answer at once", async () => {
    const seen: Record<string, unknown>[] = [];
    const path = await server((r) => {
      seen.push(r.request);
      r.socket.end(frame(done()));
    });
    const client = new Client({ socket: path });
    const r = await client.mailResult(17, { waitMs: 30_000 });
    assert.deepEqual(seen[0], { v: 2, cmd: "mail-result", id: 17, wait_ms: 30_000 });
    assert.deepEqual(r, {
      id: 17,
      deployment: "billing",
      ended: true,
      state: "done",
      outcome: "succeeded",
      reason: null,
      result: Uint8Array.of(0, 255, 128, 10),
      resultBytes: 4,
    });
    await client.mailResult(17n);
    assert.deepEqual(seen[1], { v: 2, cmd: "mail-result", id: 17 }, "a bigint id is sent as a number; no wait_ms");
    await client.mailResult(17, { waitMs: 2.2 });
    assert.equal(seen[2]!["wait_ms"], 3, "fractions round up");
  });

  test("an item not ended in time: ended false, its state, no outcome or result; failures and deaths carry their reason", async () => {
    const answers = [
      done({ ended: false, state: "processing", outcome: null, result: null, result_bytes: null }),
      done({ outcome: "failed", reason: "card declined", result: "", result_bytes: 0 }),
      done({ state: "dead", outcome: "dead", reason: "exited unexpectedly: exit status 3", result: null, result_bytes: 0 }),
    ];
    const path = await server((r, n) => r.socket.end(frame(answers[n - 1])));
    const client = new Client({ socket: path });
    const pending = await client.mailResult(17, { waitMs: 10 });
    assert.equal(pending.ended, false);
    assert.equal(pending.state, "processing");
    assert.equal(pending.outcome, null);
    assert.equal(pending.result, null);
    const failed = await client.mailResult(17);
    assert.deepEqual([failed.outcome, failed.reason, [...failed.result!]], ["failed", "card declined", []]);
    const dead = await client.mailResult(17);
    assert.deepEqual([dead.state, dead.outcome, dead.reason, dead.result], ["dead", "dead", "exited unexpectedly: exit status 3", null]);
  });

  test("bad ids, waits and answers are refused with clear errors", async () => {
    const path = await server((r) => r.socket.end(frame(done({ result: "not base64!", result_bytes: 4 }))));
    const client = new Client({ socket: path });
    await assert.rejects(client.mailResult(-1), (e: unknown) => e instanceof WfhostError && e.code === 2 && /a mail id is a whole number/.test(e.message));
    await assert.rejects(client.mailResult(2n ** 60n), (e: unknown) => e instanceof WfhostError && e.code === 2);
    await assert.rejects(client.mailResult(1, { waitMs: -5 }), (e: unknown) => e instanceof WfhostError && /waitMs is a number of milliseconds/.test(e.message));
    await assert.rejects(client.mailResult(17), (e: unknown) => e instanceof WfhostError && /has a result that is not base64/.test(e.message));
    const refusing = await server((r) => r.socket.end(frame({ ok: false, code: 1, error: "no mail 99 in the store" })));
    await assert.rejects(new Client({ socket: refusing }).mailResult(99), (e: unknown) => e instanceof WfhostError && e.message === "no mail 99 in the store");
  });

  test("call sends under the key (repeating an unknown outcome), then waits for the result with the time left", async () => {
    const seen: Received[] = [];
    const path = await server((r, n) => {
      seen.push(r);
      if (n === 1) r.socket.end(frame({ ok: false, code: 1, outcome: "unknown", error: "commit failed" }));
      else if (n === 2) r.socket.end(frame({ ok: true, data: { deployment: "billing", id: 17, new: true } }));
      else r.socket.end(frame(done()));
    });
    const t0 = Date.now();
    const called = await new Client({ socket: path }).call("billing", "hi", { key: "order-17", timeoutMs: 5000 });
    assert.deepEqual(called, {
      id: 17,
      new: true,
      ended: true,
      outcome: "succeeded",
      reason: null,
      result: Uint8Array.of(0, 255, 128, 10),
    });
    assert.deepEqual(
      seen.map((r) => r.request["cmd"]),
      ["send", "send", "mail-result"],
    );
    assert.equal(seen[0]!.request["key"], "order-17");
    assert.equal(seen[1]!.request["key"], "order-17");
    assert.equal(seen[1]!.payload.toString(), "hi");
    assert.equal(seen[2]!.request["id"], 17);
    const wait = seen[2]!.request["wait_ms"] as number;
    assert.ok(wait <= 5000 - 90 && wait >= 5000 - (Date.now() - t0) - 5, `wait_ms ${wait}: the timeout less the send's time (one 100 ms pause)`);
  });

  test("call: not ended in time is ended false; a lost mail-result answer is asked again; a refusal names the id to ask with", async () => {
    let results = 0;
    const path = await server((r) => {
      if (r.request["cmd"] === "send") return r.socket.end(frame({ ok: true, data: { deployment: "billing", id: 8, new: false } }));
      results++;
      if (results === 1) return r.socket.destroy();
      r.socket.end(frame(done({ id: 8, ended: false, state: "inbox", outcome: null, result: null, result_bytes: null })));
    });
    const called = await new Client({ socket: path }).call("billing", "x", { timeoutMs: 0 });
    assert.deepEqual(called, { id: 8, new: false, ended: false, outcome: null, reason: null, result: null });
    const refusing = await server((r) => {
      if (r.request["cmd"] === "send") return r.socket.end(frame({ ok: true, data: { deployment: "billing", id: 9, new: true } }));
      r.socket.end(frame({ ok: false, code: 2, error: "unknown command \"mail-result\"" }));
    });
    await assert.rejects(new Client({ socket: refusing }).call("billing", "x"), (e: unknown) => {
      assert.ok(e instanceof WfhostError);
      assert.equal(e.code, 2);
      assert.match(e.message, /^mail 9 was enqueued, but its result could not be read: unknown command "mail-result"; ask again with mailResult\(9\)/);
      return true;
    });
  });
});

describe("status and events", () => {
  test("status returns the deployments", async () => {
    const path = await server((r) => {
      assert.deepEqual(r.request, { v: 2, cmd: "status" });
      r.socket.end(frame({ ok: true, data: { deployments: [{ id: "orders", implementation: "@wfhost/child/0.1.0" }] } }));
    });
    const s = await new Client({ socket: path }).status();
    assert.equal(s.deployments[0]!["implementation"], "@wfhost/child/0.1.0");
  });

  test("events streams after the cursor, ends with the stream, and stopping a follow closes the connection", async () => {
    let closed = false;
    const path = await server((r) => {
      assert.deepEqual(r.request, { v: 2, cmd: "events", after: 4, follow: r.request["follow"] });
      r.socket.write(frame({ ok: true, data: { streaming: true } }));
      for (const seq of [5, 6, 7]) r.socket.write(frame({ seq, at_ms: 1, deployment: "orders", kind: "ready", body: {} }));
      if (r.request["follow"] === true) r.socket.on("close", () => (closed = true));
      else r.socket.end();
    });
    const client = new Client({ socket: path });
    const seqs: number[] = [];
    for await (const e of client.events({ after: 4 })) seqs.push(e.seq);
    assert.deepEqual(seqs, [5, 6, 7]);
    const followed: number[] = [];
    for await (const e of client.events({ after: 4, follow: true })) {
      followed.push(e.seq);
      if (e.seq === 6) break;
    }
    assert.deepEqual(followed, [5, 6]);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(closed, true, "the follow's connection is closed");
  });
});

describe("questions, answer and follow", () => {
  test("questions lists the open questions with their prompts; the deployment filter is sent only when given", async () => {
    const seen: Record<string, unknown>[] = [];
    const q = { deployment: "orders", id: 17, key: "approve", prompt: { order: "A-17", total: 3 }, attempt: 2, asked_at_ms: 1_764_650_000_000, age_ms: 5400 };
    const path = await server((r) => {
      seen.push(r.request);
      r.socket.end(frame({ ok: true, data: { questions: r.request["deployment"] === "none" ? [] : [q] } }));
    });
    const client = new Client({ socket: path });
    assert.deepEqual(await client.questions(), [q]);
    assert.deepEqual(await client.questions({ deployment: "none" }), []);
    assert.deepEqual(seen, [{ v: 2, cmd: "questions" }, { v: 2, cmd: "questions", deployment: "none" }]);
  });

  test("a questions answer of another shape is refused, naming it", async () => {
    const path = await server((r) => r.socket.end(frame({ ok: true, data: { questions: [{ deployment: "orders", id: -1, key: "k" }] } })));
    await assert.rejects(new Client({ socket: path }).questions(), (e: unknown) => e instanceof WfhostError && /questions answer has a question 0 whose id is not a whole number/.test(e.message));
  });

  test("answer sends the id, key, JSON value and label, and returns the supervisor's data; a refusal carries its words", async () => {
    const seen: Record<string, unknown>[] = [];
    const data = {
      answered_at_ms: 1_764_650_000_123,
      by: { label: "ana", uid: 1000, user: "ana" },
      deployment: "orders",
      id: 17,
      journal_seq: 58,
      key: "approve",
      new: true,
    };
    const path = await server((r, n) => {
      seen.push(r.request);
      if (n === 1) r.socket.end(frame({ ok: true, data }));
      else r.socket.end(frame({ ok: false, code: 1, error: 'mail 17\'s question "approve" was answered {"approved":true} at 2026-12-02T03:00:00Z by ana; a different answer is refused' }));
    });
    const client = new Client({ socket: path });
    assert.deepEqual(await client.answer(17, "approve", { approved: true, note: "fine" }, { by: "ana" }), data);
    assert.deepEqual(seen[0], { v: 2, cmd: "answer", id: 17, key: "approve", value: { approved: true, note: "fine" }, by: "ana" });
    await assert.rejects(client.answer(17n, "approve", { approved: false }), (e: unknown) => {
      assert.ok(e instanceof WfhostError);
      assert.equal(e.code, 1);
      assert.match(e.message, /a different answer is refused/);
      return true;
    });
    assert.deepEqual(seen[1], { v: 2, cmd: "answer", id: 17, key: "approve", value: { approved: false } }, "no by unless given");
    assert.equal(seen.length, 2, "a refusal is not repeated");
  });

  test("answer refuses, before sending, a value JSON cannot carry, a bad key or label", async () => {
    let asked = 0;
    const path = await server((r) => {
      asked++;
      r.socket.end(frame({ ok: true, data: { new: true } }));
    });
    const client = new Client({ socket: path });
    const usage = (re: RegExp) => (e: unknown) => e instanceof WfhostError && e.code === 2 && re.test(e.message);
    await assert.rejects(client.answer(1, "k", undefined), usage(/an answer is a JSON value, got undefined/));
    await assert.rejects(client.answer(1, "k", 5n), usage(/cannot be encoded/));
    await assert.rejects(client.answer(1, "", true), usage(/a question's key is 1 to 256 bytes of UTF-8, got 0 bytes/));
    await assert.rejects(client.answer(1, "k".repeat(257), true), usage(/got 257 bytes/));
    await assert.rejects(client.answer(1, "k", true, { by: "b".repeat(129) }), usage(/by is a label of at most 128 characters, got 129/));
    await assert.rejects(client.answer(-1, "k", true), usage(/a mail id is a whole number/));
    assert.equal(asked, 0);
    assert.equal((await client.answer(1, "k", null)).new, true, "null is a JSON value");
  });

  test("follow asks for one item's events and ends after its mail_done, without waiting for the close", async () => {
    let request: Record<string, unknown> = {};
    const path = await server((r) => {
      request = r.request;
      r.socket.write(frame({ ok: true, data: { streaming: true } }));
      const ev = (seq: number, kind: string, body: Record<string, unknown>) => frame({ seq, at_ms: seq, deployment: "orders", kind, body });
      r.socket.write(ev(11, "mail_started", { id: 17, attempt: 1 }));
      r.socket.write(ev(12, "mail_progress", { id: 17, data: { done: 1 } }));
      r.socket.write(ev(13, "question_asked", { id: 17, key: "approve" }));
      r.socket.write(ev(15, "mail_done", { id: 17, outcome: "succeeded" }));
      // Left open: the client must not wait for the supervisor to close it.
    });
    const kinds: string[] = [];
    for await (const e of new Client({ socket: path }).follow(17, { after: 10 })) kinds.push(`${e.seq} ${e.kind}`);
    assert.deepEqual(kinds, ["11 mail_started", "12 mail_progress", "13 question_asked", "15 mail_done"]);
    assert.deepEqual(request, { v: 2, cmd: "events", mail: 17, follow: true, after: 10 });
  });

  test("follow reconnects after a break with after = the last seq seen: no gap, no duplicate", async () => {
    const requests: Record<string, unknown>[] = [];
    const path = await server((r, n) => {
      requests.push(r.request);
      const ev = (seq: number, kind: string) => frame({ seq, at_ms: seq, deployment: "orders", kind, body: { id: 4 } });
      if (n === 1) {
        r.socket.write(Buffer.concat([frame({ ok: true, data: { streaming: true } }), ev(5, "mail_started"), ev(6, "step_started")]));
        setTimeout(() => r.socket.destroy(), 20);
      } else if (n === 2) {
        // Broken before the stream even started.
        r.socket.destroy();
      } else {
        // A supervisor that sends seq 6 again is not believed twice.
        r.socket.write(Buffer.concat([frame({ ok: true, data: { streaming: true } }), ev(6, "step_started"), ev(7, "mail_given_back"), ev(9, "mail_dead")]));
        r.socket.end();
      }
    });
    const seqs: number[] = [];
    for await (const e of new Client({ socket: path }).follow(4)) seqs.push(e.seq);
    assert.deepEqual(seqs, [5, 6, 7, 9]);
    assert.deepEqual(
      requests.map((r) => r["after"]),
      [0, 6, 6],
    );
    assert.ok(requests.every((r) => r["mail"] === 4 && r["follow"] === true));
  });

  test("follow: a connection that brings an event starts the count of breaks again", async () => {
    const path = await server((r, n) => {
      const seq = Number(r.request["after"]) + 1;
      const kind = n === 8 ? "mail_done" : "step_finished";
      r.socket.write(Buffer.concat([frame({ ok: true, data: { streaming: true } }), frame({ seq, at_ms: 1, deployment: "o", kind, body: {} })]));
      setTimeout(() => r.socket.destroy(), 5);
    });
    const seqs: number[] = [];
    for await (const e of new Client({ socket: path }).follow(1)) seqs.push(e.seq);
    assert.deepEqual(seqs, [1, 2, 3, 4, 5, 6, 7, 8], "8 connections, 7 breaks, each after progress");
  });

  test("follow gives up after 5 breaks in a row, naming the item and the last seq; a refusal is not retried", async () => {
    let connections = 0;
    const path = await server((r) => {
      connections++;
      if (r.request["mail"] === 99) {
        r.socket.end(frame({ ok: false, code: 1, error: "no mail item 99" }));
        return;
      }
      if (connections === 1) {
        r.socket.write(Buffer.concat([frame({ ok: true, data: { streaming: true } }), frame({ seq: 3, at_ms: 1, deployment: "o", kind: "mail_started", body: {} })]));
      }
      setTimeout(() => r.socket.destroy(), 10);
    });
    const client = new Client({ socket: path });
    const seen: number[] = [];
    const t0 = performance.now();
    await assert.rejects(
      (async () => {
        for await (const e of client.follow(4)) seen.push(e.seq);
      })(),
      (e: unknown) => {
        assert.ok(e instanceof WfhostError);
        assert.equal(e.code, 3);
        assert.match(e.message, /^following mail 4: the connection broke 5 times in a row \(last: .*\); the last event seen was seq 3: follow again with \{ after: 3 \}$/);
        return true;
      },
    );
    assert.deepEqual(seen, [3]);
    assert.equal(connections, 5, "5 breaks in a row, the first after the event it brought");
    assert.ok(performance.now() - t0 >= 1400, "with pauses of 100, 200, 400 and 800 ms");
    connections = 0;
    await assert.rejects(
      (async () => {
        for await (const _ of client.follow(99)) void _;
      })(),
      (e: unknown) => e instanceof WfhostError && e.code === 1 && e.message === "no mail item 99",
    );
    assert.equal(connections, 1);
  });

  test("events passes the mail and deployment filters when given", async () => {
    const seen: Record<string, unknown>[] = [];
    const path = await server((r) => {
      seen.push(r.request);
      r.socket.write(frame({ ok: true, data: { streaming: true } }));
      r.socket.end(frame({ seq: 1, at_ms: 1, deployment: "orders", kind: "mail_accepted", body: { id: 2 } }));
    });
    const client = new Client({ socket: path });
    for await (const _ of client.events({ mail: 2n, deployment: "orders" })) void _;
    assert.deepEqual(seen[0], { v: 2, cmd: "events", after: 0, follow: false, mail: 2, deployment: "orders" });
  });
});

describe("config", () => {
  test("state_dir is read from [supervisor], relative to the file, with TOML strings and comments", () => {
    const d = tempDir();
    const cases: [string, string][] = [
      ['[supervisor]\nstate_dir = "state"   # here\n', join(d, "state")],
      ["# top\n[supervisor]\npolicy_interval = \"10s\"\nstate_dir = '/var/lib/x'\n", "/var/lib/x"],
      ['[defaults]\nstate_dir = "no"\n[supervisor]\n  state_dir = "a\\\\b\\u00e9"\n[[deployment]]\nid = "x"\n', join(d, "a\\bé")],
      ['[[deployment]]\nid = "x"\n', "/var/lib/wfhost"],
      ['supervisor.state_dir = "dotted"\n', join(d, "dotted")],
    ];
    for (const [text, want] of cases) {
      const f = join(d, "wfhost.toml");
      writeFileSync(f, text);
      assert.equal(stateDirOf(f), want, text);
    }
    const f = join(d, "bad.toml");
    writeFileSync(f, "[supervisor]\nstate_dir = 5\n");
    assert.throws(() => new Client({ config: f }), (e: unknown) => e instanceof WfhostError && e.code === 2 && /bad.toml:2: state_dir must be a string/.test(e.message));
    assert.throws(() => new Client({ config: join(d, "missing.toml") }), /cannot read the config file/);
    writeFileSync(f, '[supervisor]\nstate_dir = "s"\n');
    assert.equal(new Client({ config: f }).socketPath, join(d, "s", "wfhost.sock"));
  });
});
