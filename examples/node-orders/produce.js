#!/usr/bin/env node
// A producer for node-orders: sends orders through the supervisor's
// control socket with @wfhost/child/client, each under its own
// idempotency key (so a retried send enqueues once), and prints one JSON
// line per accepted item: {"n":3,"id":"17","key":"order-3","new":true}.
//
//   node produce.js --config wfhost.toml --deployment orders-node --count 10

import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";

import { Client, WfhostError } from "@wfhost/child/client";

const { values: args } = parseArgs({
  options: {
    config: { type: "string" },
    socket: { type: "string" },
    deployment: { type: "string", default: "orders-node" },
    count: { type: "string", default: "10" },
    prefix: { type: "string", default: "order" },
    "interval-ms": { type: "string", default: "0" },
  },
});
if ((args.config === undefined) === (args.socket === undefined)) {
  console.error("produce: say which supervisor: --config PATH (its config file) or --socket PATH");
  process.exit(2);
}
const client = args.config !== undefined ? new Client({ config: args.config }) : new Client({ socket: args.socket });
const count = Number(args.count);
const interval = Number(args["interval-ms"]);
for (let n = 1; n <= count; n++) {
  const key = `${args.prefix}-${n}`;
  try {
    const sent = await client.send(args.deployment, JSON.stringify({ order: key }), { key });
    console.log(JSON.stringify({ n, id: sent.id.toString(), key, new: sent.new }));
  } catch (e) {
    if (!(e instanceof WfhostError)) throw e;
    console.error(`produce: ${key}: ${e.message}`);
    process.exit(e.code);
  }
  if (interval > 0) await sleep(interval);
}
